//go:build cgo

package main

import (
	"errors"

	"github.com/vgpu-project/vgpu/pkg/virt"
)

var _ domainAPI = (*virt.Domain)(nil)

// withDomain connects, finds the domain and hands it to fn.
func (g *globals) withDomain(f *domainFlags, name string, fn func(domainAPI) error) error {
	conn, err := virt.Connect(f.uri)
	if err != nil {
		return err
	}
	defer conn.Close()
	d, err := conn.LookupDomain(name)
	if errors.Is(err, virt.ErrNoDomain) {
		return usageError{err}
	}
	if err != nil {
		return err
	}
	defer d.Close()
	return fn(d)
}
