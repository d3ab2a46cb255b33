// Package domxml reads and writes the parts of a libvirt domain XML that vgpu
// owns: the hostdevs that hand a vGPU to a VM, and the request element in our
// own namespace that records which vGPUs a domain asked for and got:
//
//	<metadata>
//	  <vgpu:request xmlns:vgpu="https://vgpu-project.github.io/xmlns/vgpu/1.0" profile="mi25-4g" count="1">
//	    <vgpu:vgpu index="0" kind="vf" id="0000:03:00.2"/>
//	  </vgpu:request>
//	</metadata>
//
// Everything else in a domain XML belongs to libvirt and the admin: the
// editing functions (Rewrite, AddHostdevs, RemoveHostdevs, SetRequest)
// splice bytes at the offsets the XML decoder reports instead of
// re-serialising the document, so every byte they do not mean to change stays
// as it was, including elements newer than libvirtxml knows.
//
// The package is pure Go (no cgo): the libvirt hook links it.
package domxml

// Namespace is our metadata namespace; the version is part of the URI.
const Namespace = "https://vgpu-project.github.io/xmlns/vgpu/1.0"

// Prefix is the namespace prefix we write, and the key libvirt's
// virDomainSetMetadata stores our element under.
const Prefix = "vgpu"

// MaxCount is the most vGPUs one domain may ask for. It matches
// alloc.MaxCount (domxml must not import alloc: the hook would link bbolt).
const MaxCount = 64
