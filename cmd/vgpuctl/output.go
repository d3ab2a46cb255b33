package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// table prints rows under a header, aligned like virsh and lspci users expect.
func table(w io.Writer, header []string, rows [][]string) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(header, "\t"))
	for _, r := range rows {
		fmt.Fprintln(tw, strings.Join(r, "\t"))
	}
	return tw.Flush()
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// orDash keeps empty table cells visible.
func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func mb(v uint64) string {
	switch {
	case v == 0:
		return "-"
	case v%1024 == 0:
		return fmt.Sprintf("%dG", v/1024)
	default:
		return fmt.Sprintf("%dM", v)
	}
}

func intOrDash(v int) string {
	if v < 0 {
		return "-"
	}
	return fmt.Sprint(v)
}
