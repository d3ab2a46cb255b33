package domxml

import (
	"encoding/xml"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Request is our metadata element: the domain asks for Count vGPUs of
// Profile, and VGPUs are the ones it was given, by index.
type Request struct {
	Profile string `json:"profile"`
	Count   int    `json:"count"`
	VGPUs   []VGPU `json:"vgpus"`
	// Origin is what the source host's vGPUs are, in the XML a migration
	// carries: the destination's hook admits only vGPUs that match it.
	Origin *Origin `json:"origin,omitempty"`
}

// Origin describes the vGPUs a domain runs with on the host it migrates
// from. Empty fields are not compared.
type Origin struct {
	Host string `json:"host,omitempty"`
	// Type is the mdev type id or NVIDIA type name ("" for plain VFs).
	Type string `json:"type,omitempty"`
	// Driver is the vendor driver of the GPU or mdev parent; Version its
	// module version (/sys/module/DRIVER/version).
	Driver  string `json:"driver,omitempty"`
	Version string `json:"version,omitempty"`
	// Probe marks a migration vgpuctl migrate --dry-run starts only to ask
	// the destination's hook what it would lease: the hook answers and
	// always refuses it, so nothing moves.
	Probe bool `json:"probe,omitempty"`
}

// requestXML is the element as written. Unknown attributes and children are
// ignored, so a newer vgpu's additions do not break an older hook.
type requestXML struct {
	XMLName xml.Name  `xml:"https://vgpu-project.github.io/xmlns/vgpu/1.0 request"`
	Profile string    `xml:"profile,attr"`
	Count   string    `xml:"count,attr"`
	VGPUs   []vgpuXML `xml:"https://vgpu-project.github.io/xmlns/vgpu/1.0 vgpu"`
	Origin  *struct {
		Host    string `xml:"host,attr"`
		Type    string `xml:"type,attr"`
		Driver  string `xml:"driver,attr"`
		Version string `xml:"version,attr"`
		Probe   string `xml:"probe,attr"`
	} `xml:"https://vgpu-project.github.io/xmlns/vgpu/1.0 origin"`
}

type vgpuXML struct {
	Index string `xml:"index,attr"`
	Kind  string `xml:"kind,attr"`
	ID    string `xml:"id,attr"`
}

// ParseRequest reads one request element (its own xmlns declaration
// included, as libvirt's virDomainGetMetadata returns it) and checks it.
func ParseRequest(b []byte) (Request, error) {
	var rx requestXML
	if err := xml.Unmarshal(b, &rx); err != nil {
		return Request{}, fmt.Errorf("%w: read the vgpu request element: %w", ErrInvalid, err)
	}
	return rx.request()
}

func (rx requestXML) request() (Request, error) {
	r := Request{Profile: rx.Profile}
	n, err := strconv.Atoi(rx.Count)
	if err != nil {
		return r, fmt.Errorf("%w: vgpu request: count %q is not a number", ErrInvalid, rx.Count)
	}
	r.Count = n
	if o := rx.Origin; o != nil {
		r.Origin = &Origin{Host: o.Host, Type: o.Type, Driver: o.Driver, Version: o.Version, Probe: o.Probe == "yes"}
	}
	for _, vx := range rx.VGPUs {
		i, err := strconv.Atoi(vx.Index)
		if err != nil {
			return r, fmt.Errorf("%w: vgpu request: vGPU index %q is not a number", ErrInvalid, vx.Index)
		}
		v, err := ParseVGPU(i, vx.Kind, vx.ID)
		if err != nil {
			return r, fmt.Errorf("vgpu request: %w", err)
		}
		r.VGPUs = append(r.VGPUs, v)
	}
	slices.SortFunc(r.VGPUs, func(a, b VGPU) int { return a.Index - b.Index })
	return r, r.Validate()
}

// Validate checks what every request must satisfy: a profile name, a count
// of 1 to MaxCount, at most Count vGPUs, unique indices and ids, vGPUs of
// one shape (a profile gives either PCI functions or mdevs).
func (r Request) Validate() error {
	if !validProfile(r.Profile) {
		return fmt.Errorf("%w: vgpu request: profile %q is not a profile name (lowercase letters, digits and '-')", ErrInvalid, r.Profile)
	}
	if r.Count < 1 || r.Count > MaxCount {
		return fmt.Errorf("%w: vgpu request for %s: count %d: want 1 to %d", ErrInvalid, r.Profile, r.Count, MaxCount)
	}
	if len(r.VGPUs) > r.Count {
		return fmt.Errorf("%w: vgpu request for %d x %s lists %d vGPUs", ErrInvalid, r.Count, r.Profile, len(r.VGPUs))
	}
	idx := map[int]bool{}
	ids := map[string]bool{}
	for _, v := range r.VGPUs {
		if _, err := ParseVGPU(v.Index, string(v.Kind), v.ID()); err != nil {
			return err
		}
		if idx[v.Index] || ids[v.ID()] {
			return fmt.Errorf("%w: vgpu request for %s: vGPU %d (%s) is listed twice", ErrInvalid, r.Profile, v.Index, v.ID())
		}
		if !sameShape(v, r.VGPUs[0]) {
			return fmt.Errorf("%w: vgpu request for %s mixes mdev and PCI vGPUs", ErrInvalid, r.Profile)
		}
		idx[v.Index], ids[v.ID()] = true, true
	}
	return nil
}

// validProfile mirrors the catalog's name rule (profile.validName), loosely:
// the hook must not reject what a newer catalog allows.
func validProfile(s string) bool {
	if s == "" || len(s) > 63 {
		return false
	}
	for _, c := range []byte(s) {
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '-' {
			return false
		}
	}
	return true
}

// XML is the request element with its namespace declared on itself, as
// libvirt writes it back in a domain XML.
func (r Request) XML() string { return r.render(Prefix+":", "") }

// SetMetadataXML is the element as virDomainSetMetadata takes it:
// unqualified, for libvirt puts it and its children in Namespace under the
// key Prefix (and refuses a namespace declared in it).
func (r Request) SetMetadataXML() string { return r.render("", "") }

// render writes the element with names prefixed by prefix ("vgpu:" or "");
// indent is the indentation of the line the element starts on, for its
// children and closing tag.
func (r Request) render(prefix, indent string) string {
	var b strings.Builder
	fmt.Fprintf(&b, `<%srequest`, prefix)
	if prefix != "" {
		fmt.Fprintf(&b, ` xmlns:%s="%s"`, strings.TrimSuffix(prefix, ":"), Namespace)
	}
	fmt.Fprintf(&b, ` profile="%s" count="%d"`, escape(r.Profile), r.Count)
	if len(r.VGPUs) == 0 {
		b.WriteString("/>")
		return b.String()
	}
	b.WriteString(">\n")
	for _, v := range r.VGPUs {
		fmt.Fprintf(&b, `%s  <%svgpu index="%d" kind="%s" id="%s"/>`+"\n", indent, prefix, v.Index, escape(string(v.Kind)), escape(v.ID()))
	}
	if o := r.Origin; o != nil {
		probe := ""
		if o.Probe {
			probe = ` probe="yes"`
		}
		fmt.Fprintf(&b, `%s  <%sorigin host="%s" type="%s" driver="%s" version="%s"%s/>`+"\n", indent, prefix,
			escape(o.Host), escape(o.Type), escape(o.Driver), escape(o.Version), probe)
	}
	fmt.Fprintf(&b, "%s</%srequest>", indent, prefix)
	return b.String()
}

// escape makes s safe inside a quoted attribute value.
func escape(s string) string {
	var b strings.Builder
	_ = xml.EscapeText(&b, []byte(s)) // a strings.Builder does not fail
	return b.String()
}

// Has reports whether the request lists a vGPU with this id.
func (r Request) Has(id string) bool {
	_, ok := r.Find(id)
	return ok
}

// Find returns the request's vGPU with this id.
func (r Request) Find(id string) (VGPU, bool) {
	for _, v := range r.VGPUs {
		if v.ID() == id {
			return v, true
		}
	}
	return VGPU{}, false
}

// FreeIndices are the n lowest indices no vGPU of r holds: a detached
// vGPU's index (and so its mdev UUID) is reused first.
func (r Request) FreeIndices(n int) []int {
	used := map[int]bool{}
	for _, v := range r.VGPUs {
		used[v.Index] = true
	}
	var out []int
	for i := 0; len(out) < n; i++ {
		if !used[i] {
			out = append(out, i)
		}
	}
	return out
}

// Add returns r with vs added (their indices must be free) and the count
// raised to cover them, checked.
func (r Request) Add(vs ...VGPU) (Request, error) {
	out := Request{Profile: r.Profile, Count: r.Count, VGPUs: slices.Clone(r.VGPUs), Origin: r.Origin}
	out.VGPUs = append(out.VGPUs, vs...)
	slices.SortFunc(out.VGPUs, func(a, b VGPU) int { return a.Index - b.Index })
	out.Count = max(out.Count, len(out.VGPUs))
	return out, out.Validate()
}

// Remove returns r without the vGPUs with these ids and the count lowered
// by as many; ok is false when none remain (the request should go).
func (r Request) Remove(ids ...string) (out Request, ok bool) {
	out = Request{Profile: r.Profile, Count: r.Count, Origin: r.Origin}
	for _, v := range r.VGPUs {
		if slices.Contains(ids, v.ID()) {
			out.Count--
			continue
		}
		out.VGPUs = append(out.VGPUs, v)
	}
	return out, out.Count > 0
}

// Equal reports whether two requests say the same.
func (r Request) Equal(o Request) bool {
	return r.Profile == o.Profile && r.Count == o.Count && slices.Equal(r.VGPUs, o.VGPUs) &&
		(r.Origin == nil) == (o.Origin == nil) && (r.Origin == nil || *r.Origin == *o.Origin)
}

// Mismatch says how the vGPU described by here differs from the origin,
// or "" when it matches (fields empty on either side are not compared).
func (o Origin) Mismatch(here Origin) string {
	var diffs []string
	cmp := func(what, src, dst string) {
		if src != "" && dst != "" && src != dst {
			diffs = append(diffs, fmt.Sprintf("%s %s here, %s on %s", what, dst, src, orSource(o.Host)))
		}
	}
	cmp("type", o.Type, here.Type)
	cmp("vendor driver", o.Driver, here.Driver)
	cmp("driver version", o.Version, here.Version)
	return strings.Join(diffs, "; ")
}

func orSource(h string) string {
	if h == "" {
		return "the source"
	}
	return h
}
