package simkernel

import (
	"strings"
	"syscall"
)

// kstrtoul parses as the kernel's kstrtoul(buf, 0, &v) does: an optional
// '+', base from the prefix (0x hex, 0 octal, else decimal), digits, at most
// one trailing newline and nothing else. "-1" and " 1" are EINVAL; a value
// that does not fit in bits is ERANGE.
func kstrtoul(s string, bits uint) (uint64, syscall.Errno) {
	return kstrtoulBase(strings.TrimPrefix(s, "+"), 0, bits)
}

// kstrtol10 parses as kstrtol(buf, 10, &v) does: an optional '-' or '+',
// decimal digits only ("0x47b" is EINVAL: base 10 takes no prefix), at
// most one trailing newline; out of int64 is ERANGE.
func kstrtol10(s string) (int64, syscall.Errno) {
	neg := strings.HasPrefix(s, "-")
	if neg {
		s = s[1:]
	} else {
		s = strings.TrimPrefix(s, "+")
	}
	v, e := kstrtoulBase(s, 10, 64)
	switch {
	case e != 0:
		return 0, e
	case neg && v > 1<<63, !neg && v >= 1<<63:
		return 0, syscall.ERANGE
	case neg:
		return -int64(v), 0
	}
	return int64(v), 0
}

// kstrtoulBase is _kstrtoull in base (0: from the prefix) with the result
// limited to bits; the caller has taken any sign.
func kstrtoulBase(s string, base uint64, bits uint) (uint64, syscall.Errno) {
	s = strings.TrimSuffix(s, "\n")
	if base == 0 {
		base = 10
		switch {
		case len(s) > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X'):
			base, s = 16, s[2:]
		case len(s) > 1 && s[0] == '0':
			base, s = 8, s[1:]
		}
	}
	if s == "" {
		return 0, syscall.EINVAL
	}
	limit := uint64(1)<<bits - 1
	if bits >= 64 {
		limit = ^uint64(0)
	}
	var v uint64
	overflow := false
	for _, c := range []byte(s) {
		var d uint64
		switch {
		case c >= '0' && c <= '9':
			d = uint64(c - '0')
		case c >= 'a' && c <= 'f':
			d = uint64(c-'a') + 10
		case c >= 'A' && c <= 'F':
			d = uint64(c-'A') + 10
		default:
			return 0, syscall.EINVAL
		}
		if d >= base {
			return 0, syscall.EINVAL
		}
		if v > (limit-d)/base {
			overflow = true
		}
		v = v*base + d
	}
	if overflow {
		return 0, syscall.ERANGE
	}
	return v, 0
}

// kstrtobool is the kernel's kstrtobool (6.2+): y/t/e/1/on true,
// n/f/d/0/off false, judged on the first one or two characters.
func kstrtobool(s string) (bool, syscall.Errno) {
	if s == "" {
		return false, syscall.EINVAL
	}
	switch s[0] {
	case 'y', 'Y', 't', 'T', 'e', 'E', '1':
		return true, 0
	case 'n', 'N', 'f', 'F', 'd', 'D', '0':
		return false, 0
	case 'o', 'O':
		if len(s) > 1 {
			switch s[1] {
			case 'n', 'N':
				return true, 0
			case 'f', 'F':
				return false, 0
			}
		}
	}
	return false, syscall.EINVAL
}

// streq is sysfs_streq: equal but for one trailing newline on either side.
func streq(a, b string) bool {
	return strings.TrimSuffix(a, "\n") == strings.TrimSuffix(b, "\n")
}

// isUUID reports whether s is a UUID as guid_parse accepts it: 36
// characters, hyphens at 8, 13, 18 and 23, hex elsewhere, either case.
func isUUID(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch i {
		case 8, 13, 18, 23:
			if c != '-' {
				return false
			}
		default:
			if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F') {
				return false
			}
		}
	}
	return true
}
