package revert

import (
	"errors"
	"slices"
	"testing"
)

func TestFailRunsUndosLastFirstAndReportsEachFailure(t *testing.T) {
	var l List
	var ran []string
	errDetach := errors.New("domain gone")
	errRelease := errors.New("vgpud down")
	l.Add("releasing 0000:03:00.2 in vgpud", func() error { ran = append(ran, "release"); return errRelease })
	l.Add("stopping nothing", func() error { ran = append(ran, "noop"); return nil })
	l.Add("detaching the new hostdevs", func() error { ran = append(ran, "detach"); return errDetach })
	cause := errors.New("set request: EIO")

	err := l.Fail(cause)
	if want := []string{"detach", "noop", "release"}; !slices.Equal(ran, want) {
		t.Fatalf("undos ran %v, want %v (last added first, all of them)", ran, want)
	}
	want := "set request: EIO; detaching the new hostdevs failed too: domain gone; releasing 0000:03:00.2 in vgpud failed too: vgpud down"
	if err == nil || err.Error() != want {
		t.Fatalf("Fail = %v, want %q", err, want)
	}
	for _, e := range []error{cause, errDetach, errRelease} {
		if !errors.Is(err, e) {
			t.Errorf("Fail's error does not wrap %v", e)
		}
	}
	var failed Failed
	if !errors.As(err, &failed) || len(failed) != 2 || failed[0].What != "detaching the new hostdevs" {
		t.Errorf("Fail's error carries failures %+v, want the two that failed, in the order they ran", failed)
	}
	// The list is spent: a second Fail undoes nothing again.
	ran = nil
	if err := l.Fail(cause); err != cause || len(ran) != 0 {
		t.Errorf("second Fail = %v after running %v, want the cause alone and no undo", err, ran)
	}
}

func TestFailReturnsTheCauseItselfWhenEveryUndoSucceeds(t *testing.T) {
	var l List
	n := 0
	l.Add("a", func() error { n++; return nil })
	l.Add("b", func() error { n++; return nil })
	cause := errors.New("boom")
	if err := l.Fail(cause); err != cause {
		t.Fatalf("Fail = %v, want the cause unchanged", err)
	}
	if n != 2 {
		t.Fatalf("%d undos ran, want 2", n)
	}
}

func TestSuccessDropsTheUndos(t *testing.T) {
	var l List
	l.Add("a", func() error { t.Error("an undo ran after Success"); return nil })
	l.Success()
	if err := l.Fail(errors.New("later")); err == nil || err.Error() != "later" {
		t.Fatalf("Fail after Success = %v, want the cause alone", err)
	}
	if err := l.Undo(); err != nil {
		t.Fatalf("Undo after Success = %v, want nil", err)
	}
}

func TestUndoNamesWhatCouldNotBeUndone(t *testing.T) {
	var l List
	errBack := errors.New("ledger locked")
	l.Add("giving the source's vGPUs back", func() error { return errBack })
	err := l.Undo()
	if want := "giving the source's vGPUs back failed: ledger locked"; err == nil || err.Error() != want {
		t.Fatalf("Undo = %v, want %q", err, want)
	}
	if !errors.Is(err, errBack) {
		t.Errorf("Undo's error does not wrap the undo's own")
	}
	var l2 List
	l2.Add("x", func() error { return errBack })
	if err := l2.Fail(nil); !errors.Is(err, errBack) {
		t.Errorf("Fail(nil) = %v, want the undo's failure", err)
	}
}
