package revert

import "strings"

// List holds the undos of a change in progress. Its zero value is empty
// and ready to use; a List is not safe for concurrent use.
type List struct {
	undos []undo
}

type undo struct {
	what string
	fn   func() error
}

// Add records fn as the undo of the step just done; what names the undo as
// a report says it ("releasing 0000:03:00.2 in vgpud").
func (l *List) Add(what string, fn func() error) {
	l.undos = append(l.undos, undo{what, fn})
}

// Success drops the undos: the change is done.
func (l *List) Success() { l.undos = nil }

// Undo runs the undos, the last added first, every one whatever the
// others return, and empties the list. It returns nil when all succeeded,
// else a Failed naming each that did not.
func (l *List) Undo() error {
	var failed Failed
	for i := len(l.undos) - 1; i >= 0; i-- {
		u := l.undos[i]
		if err := u.fn(); err != nil {
			failed = append(failed, Failure{What: u.what, Err: err})
		}
	}
	l.undos = nil
	if len(failed) == 0 {
		return nil
	}
	return failed
}

// Fail runs the undos after cause made the change fail. It returns cause
// itself when every undo succeeded (Undo's result when cause is nil), else cause followed by
// "; <what> failed too: <error>" for each undo that did not; the result
// wraps cause and each failure.
func (l *List) Fail(cause error) error {
	err := l.Undo()
	if err == nil {
		return cause
	}
	if cause == nil {
		return err
	}
	return &partial{cause: cause, failed: err.(Failed)}
}

// Failure is one undo that failed.
type Failure struct {
	What string // the undo, as Add named it
	Err  error
}

func (f Failure) Error() string { return f.What + " failed: " + f.Err.Error() }
func (f Failure) Unwrap() error { return f.Err }

// Failed lists the undos that failed, in the order they ran.
type Failed []Failure

func (f Failed) Error() string {
	s := make([]string, len(f))
	for i, x := range f {
		s[i] = x.Error()
	}
	return strings.Join(s, "; ")
}

func (f Failed) Unwrap() []error {
	errs := make([]error, len(f))
	for i, x := range f {
		errs[i] = x
	}
	return errs
}

// partial is a failed step whose undo failed too.
type partial struct {
	cause  error
	failed Failed
}

func (p *partial) Error() string {
	var b strings.Builder
	b.WriteString(p.cause.Error())
	for _, f := range p.failed {
		b.WriteString("; " + f.What + " failed too: " + f.Err.Error())
	}
	return b.String()
}

func (p *partial) Unwrap() []error { return []error{p.cause, p.failed} }
