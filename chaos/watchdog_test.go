//go:build chaos

package chaos

import (
	"bytes"
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync"
	"time"
)

// ringLog keeps the last lines written to it (an io.Writer for hclog), so that a hung test
// can print what its Raft nodes said last without logging every line of every passing run.
type ringLog struct {
	mu    sync.Mutex
	lines []string
	next  int
}

func newRingLog(n int) *ringLog { return &ringLog{lines: make([]string, n)} }

func (l *ringLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, line := range strings.Split(strings.TrimRight(string(p), "\n"), "\n") {
		l.lines[l.next%len(l.lines)] = line
		l.next++
	}
	return len(p), nil
}

// String returns the kept lines, oldest first.
func (l *ringLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var b strings.Builder
	start := max(0, l.next-len(l.lines))
	for i := start; i < l.next; i++ {
		b.WriteString(l.lines[i%len(l.lines)])
		b.WriteByte('\n')
	}
	return b.String()
}

// watchdog fails fast on a hang that virtual time hides: inside a synctest bubble a
// goroutine that never blocks stops the clock, so every timeout in the test stops too. If
// done is not closed within limit (real time), watchdog prints what, the log and three
// goroutine dumps 500 ms apart (a livelock shows different goroutines running) to stderr
// and exits the process with status 2.
func watchdog(limit time.Duration, what string, log *ringLog, done <-chan struct{}) {
	go func() {
		select {
		case <-done:
			return
		case <-time.After(limit):
		}
		var b bytes.Buffer
		fmt.Fprintf(&b, "WATCHDOG: %s still running after %v of real time\n--- last log lines:\n%s", what, limit, log)
		buf := make([]byte, 8<<20)
		for i := range 3 {
			n := runtime.Stack(buf, true)
			fmt.Fprintf(&b, "--- goroutine dump %d:\n%s\n", i+1, buf[:n])
			time.Sleep(500 * time.Millisecond)
		}
		os.Stderr.Write(b.Bytes())
		os.Exit(2)
	}()
}
