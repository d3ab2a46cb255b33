//go:build cgo

package main

import (
	"errors"

	"github.com/vgpu-project/vgpu/internal/usage"
	"github.com/vgpu-project/vgpu/pkg/attach"
	"github.com/vgpu-project/vgpu/pkg/engine"

	"github.com/vgpu-project/vgpu/pkg/virt"
)

var _ attach.Domain = (*virt.Domain)(nil)

// withDomain connects, finds the domain and hands it to fn.
func (g *globals) withDomain(f *domainFlags, name string, fn func(attach.Domain) error) error {
	conn, err := virt.Connect(f.uri)
	if err != nil {
		return err
	}
	defer conn.Close()
	d, err := conn.LookupDomain(name)
	if errors.Is(err, virt.ErrNoDomain) {
		return usage.Wrap(err)
	}
	if err != nil {
		return err
	}
	defer d.Close()
	return fn(d)
}

// knownDomains lists every domain libvirt knows at uri, running or defined.
func (g *globals) knownDomains(uri string) ([]engine.KnownDomain, error) {
	if g.listDomains != nil {
		return g.listDomains(uri)
	}
	conn, err := virt.Connect(uri)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	ds, err := conn.ListDomains()
	if err != nil {
		return nil, err
	}
	out := make([]engine.KnownDomain, 0, len(ds))
	for _, d := range ds {
		out = append(out, engine.KnownDomain{UUID: d.UUID, Name: d.Name, Active: d.Active, XML: d.XML})
	}
	return out, nil
}
