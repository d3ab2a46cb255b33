// Package virtmigrate live-migrates libvirt domains with their vGPUs: it
// runs pkg/migrate's checks, plan and watch over libvirt (migrate.Source
// and migrate.Dest over pkg/virt) and hands the vGPUs over through the
// source vgpud's ledger (migrate.Ledger over pkg/client). A --dry-run asks
// the destination's hook, by a probe migration it always refuses, whether
// it would lease the vGPUs.
//
// After a migration the destination's persistent definition is pointed at
// the vGPUs the domain runs with there (virtDest.Finish): libvirt copies
// the source's, and a later start must never get whatever device sits at
// the source's addresses on the destination (CVE-2020-17376's class).
//
// vgpuctl migrate is its front door; docs/migration.md describes a run.
// Everything but the options needs cgo (libvirt).
package virtmigrate
