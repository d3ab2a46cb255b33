package simnvml

// All functions here run with the server lock held.

// occupied returns a bitmask of the memory slices GPU instances hold.
func (d *Device) occupied() uint32 {
	var m uint32
	for _, gi := range d.gis {
		m |= span(gi.start, gi.p.size)
	}
	return m
}

func span(start, size uint32) uint32 { return (1<<size - 1) << start }

// free reports whether the memory slices [start, start+size) are unused.
func (d *Device) free(start, size uint32) bool { return d.occupied()&span(start, size) == 0 }

func (d *Device) countOf(profileID uint32) int {
	n := 0
	for _, gi := range d.gis {
		if gi.p.id == profileID {
			n++
		}
	}
	return n
}

// mediaFits checks the JPEG and OFA engines: the full-GPU profile owns the
// whole pool (one OFA on A100, A30 and H100), so on A30 1g.6gb+me and
// 2g.12gb+me exclude each other, as each takes that one OFA.
func (d *Device) mediaFits(p profile) bool {
	pool := d.m.full()
	var jpegs, ofas uint32
	for _, gi := range d.gis {
		jpegs += gi.p.jpegs
		ofas += gi.p.ofas
	}
	return jpegs+p.jpegs <= pool.jpegs && ofas+p.ofas <= pool.ofas
}

// remaining counts the profile's free placements, capped by its instance
// count. A profile's placements never overlap each other (each start is a
// multiple of its size), so every free one can be used at once.
func (d *Device) remaining(p profile) int {
	left := int(p.count) - d.countOf(p.id)
	if left <= 0 || !d.mediaFits(p) {
		return 0
	}
	occ := d.occupied()
	n := 0
	for _, st := range p.starts {
		if occ&span(st, p.size) == 0 {
			n++
		}
	}
	return min(n, left)
}

// choosePlacement picks the free placement that blocks the fewest still
// free placements of any profile, the lowest start on a tie. NVIDIA does
// not document the driver's choice; this rule reproduces every creation in
// the MIG user guide's examples (the first 3g.20gb lands at 4:4, the first
// 1g.5gb at 6:1, the first 2g.10gb at 4:2) and in a published A30 session,
// including the guide's failing "-cgi 19,19,14,9", which plain first-fit
// would let succeed.
func (d *Device) choosePlacement(p profile) (uint32, bool) {
	occ := d.occupied()
	best, bestCost, found := uint32(0), 0, false
	for _, st := range p.starts {
		cand := span(st, p.size)
		if occ&cand != 0 {
			continue
		}
		cost := 0
		for _, q := range d.m.profiles {
			for _, qs := range q.starts {
				other := span(qs, q.size)
				if occ&other == 0 && other&cand != 0 {
					cost++
				}
			}
		}
		if !found || cost < bestCost {
			best, bestCost, found = st, cost, true
		}
	}
	return best, found
}

// giID is the GPU instance ID the driver gives a placement: its swizzle ID.
// open-gpu-kernel-modules numbers them by size class, then by position
// (kmigmgrMemSizeFlagToSwizzIdRange_GA100, kmigmgrSwizzIdToSpan_GA100):
// full 0, halves 1-2, quarters 3-6, eighths 7-14. The guide's examples agree
// (1g.5gb at 0:1 is ID 7, 2g.10gb at 4:2 is ID 5, 3g.20gb at 4:4 is ID 2).
func giID(memSlices, start, size uint32) uint32 {
	parts := memSlices / size
	return parts - 1 + start/size
}
