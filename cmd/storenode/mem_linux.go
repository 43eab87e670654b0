package main

import "golang.org/x/sys/unix"

// physicalMemory is the machine's memory in bytes (sysinfo(2)), or 0 when unknown.
func physicalMemory() int64 {
	var si unix.Sysinfo_t
	if unix.Sysinfo(&si) != nil {
		return 0
	}
	return int64(si.Totalram) * int64(si.Unit)
}
