package version

// Version is replaced at link time by the Makefile; "dev" for plain go build.
var Version = "dev"
