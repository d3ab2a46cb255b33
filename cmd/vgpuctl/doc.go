// Command vgpuctl lists, carves and uncarves the virtual GPUs of a host.
package main
