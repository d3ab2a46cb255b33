// Package convert is the one place that knows both API v1's wire types
// (pkg/api) and vgpu's internal ones: vgpud answers with what it turns
// into wire types here, and vgpuctl turns a carve's answer back into a
// plan to print. pkg/api's testdata pins what comes out.
package convert
