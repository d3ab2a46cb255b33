// Package strictyaml walks a YAML node tree for the project's versioned
// files (the profile catalog, the host config). Walking nodes rather than
// unmarshalling into structs gives every error its field path and line and
// reports all of them at once; it is stricter than KnownFields(true):
// unknown and duplicate keys, aliases, merge keys and custom tags are refused.
package strictyaml
