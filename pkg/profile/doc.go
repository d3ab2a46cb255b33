// Package profile is the one profile vocabulary for every vendor: a catalog
// of named, equal splits of GPU models (profiles/*.yaml, schema in
// docs/profiles.md), and the resolver that turns a profile on one GPU into
// the backend Plan the carver makes.
package profile
