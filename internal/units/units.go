// Package units words sizes for people, as the engine and its test fake
// give them in refusals.
package units

import (
	"fmt"
	"strconv"
)

// TooBig is the reason a value of n bytes is refused under a limit of
// limit bytes, for people: "1.05 MiB exceeds the limit of 1 MiB".
func TooBig(n, limit int) string {
	return fmt.Sprintf("%s exceeds the limit of %s", Words(n), Words(limit))
}

// Words is n bytes in binary units, to two decimals at most: "300
// bytes", "64 KiB", "1.05 MiB".
func Words(n int) string {
	const unit = 1024
	if n < unit {
		if n == 1 {
			return "1 byte"
		}
		return strconv.Itoa(n) + " bytes"
	}
	v, i := float64(n), -1
	for v >= unit && i < 3 {
		v /= unit
		i++
	}
	s := strconv.FormatFloat(v, 'f', 2, 64)
	for s[len(s)-1] == '0' {
		s = s[:len(s)-1]
	}
	if s[len(s)-1] == '.' {
		s = s[:len(s)-1]
	}
	return s + " " + [...]string{"KiB", "MiB", "GiB", "TiB"}[i]
}
