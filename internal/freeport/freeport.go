// Package freeport hands out loopback TCP addresses for tests that start servers or
// processes on them. Each port was free a moment ago, and none is handed out twice in one
// process: closing the probe listener frees its port, and the kernel may pick it again for
// the next probe before the first caller has bound it.
package freeport

import (
	"net"
	"sync"
)

var (
	mu    sync.Mutex
	given = map[string]bool{} // every address Addr has returned
)

// Addr returns an address on 127.0.0.1 whose port was free a moment ago and that no earlier
// call in this process returned.
func Addr() (string, error) {
	mu.Lock()
	defer mu.Unlock()
	var taken []net.Listener // ports handed out before: held open so no probe gets them again
	defer func() {
		for _, l := range taken {
			l.Close()
		}
	}()
	for {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return "", err
		}
		addr := l.Addr().String()
		if !given[addr] {
			given[addr] = true
			return addr, l.Close()
		}
		taken = append(taken, l)
	}
}
