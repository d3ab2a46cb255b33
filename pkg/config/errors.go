package config

import (
	"errors"

	"github.com/vgpu-project/vgpu/internal/strictyaml"
)

// Sentinels callers branch on with errors.Is. Desired's errors also match
// profile.ErrUnknownProfile and profile.ErrWrongGPU where those apply.
var (
	// ErrInvalid: the file breaks the schema.
	ErrInvalid = errors.New("invalid host config")
	// ErrNoSuchGPU: an entry names an address this host does not have.
	ErrNoSuchGPU = errors.New("no such GPU on this host")
	// ErrConflict: two entries claim one GPU.
	ErrConflict = errors.New("GPU claimed by two config entries")
	// ErrGIMMixed: GPUs old AMD GIM drives are given different splits or
	// schedulers, which one gim module cannot run at once.
	ErrGIMMixed = errors.New("old GIM GPUs given different splits")
	// ErrPins: an entry pins mdev UUIDs its profile cannot hold (no mdevs,
	// or more than its split).
	ErrPins = errors.New("mdev UUIDs pinned where the profile makes no such mdevs")
)

// FieldError is one problem in a config file, said so an admin can fix it:
//
//	/etc/vgpud/config.yaml:7: gpus[1].profile: unknown profile "t4-3q"; allowed: t4-16q, t4-8q, t4-4q, t4-2q, t4-1q
type FieldError = strictyaml.FieldError
