# Kbuild file for the kernel's sample mdev drivers (samples/vfio-mdev), which
# Debian does not build: mtty (serial ports), mbochs (display with a
# framebuffer pool) and mdpy (display). Built out of tree against the lab
# kernel's headers by build.sh.
obj-m := mtty.o mbochs.o mdpy.o
