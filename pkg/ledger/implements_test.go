package ledger_test

import (
	"github.com/vgpu-project/vgpu/pkg/carve"
	"github.com/vgpu-project/vgpu/pkg/ledger"
)

// The ledger is the carver's memory in vgpud; it names none of the
// carver's types, so that it does not link the carver, and these keep
// the two in step.
var (
	_ carve.DriverStore      = (*ledger.Ledger)(nil)
	_ carve.AutoprobeJournal = (*ledger.Ledger)(nil)
	_ carve.UsageChecker     = (*ledger.Ledger)(nil)
)
