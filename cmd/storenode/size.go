package main

import (
	"fmt"
	"strconv"
	"strings"
)

// parseSize reads a byte count: a whole number with an optional binary unit, case-insensitive:
// 262144, 256KiB (= 256K), 2MiB (= 2M), 1GiB (= 1G), 1TiB (= 1T). Decimal units (KB, MB) are
// refused rather than silently read as binary.
func parseSize(s string) (int64, error) {
	units := []struct {
		suffix string
		mult   int64
	}{{"tib", 1 << 40}, {"gib", 1 << 30}, {"mib", 1 << 20}, {"kib", 1 << 10},
		{"t", 1 << 40}, {"g", 1 << 30}, {"m", 1 << 20}, {"k", 1 << 10}, {"b", 1}}
	num := strings.ToLower(strings.TrimSpace(s))
	if strings.HasSuffix(num, "kb") || strings.HasSuffix(num, "mb") || strings.HasSuffix(num, "gb") || strings.HasSuffix(num, "tb") {
		return 0, fmt.Errorf("invalid size %q: use binary units (KiB, MiB, GiB, TiB)", s)
	}
	mult := int64(1)
	for _, u := range units {
		if strings.HasSuffix(num, u.suffix) {
			num, mult = strings.TrimSpace(strings.TrimSuffix(num, u.suffix)), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("invalid size %q: want a whole number of bytes with an optional unit, such as 262144, 256KiB or 2MiB", s)
	}
	if n <= 0 {
		return 0, fmt.Errorf("invalid size %q: must be positive", s)
	}
	if n > (1<<62)/mult {
		return 0, fmt.Errorf("invalid size %q: too large", s)
	}
	return n * mult, nil
}
