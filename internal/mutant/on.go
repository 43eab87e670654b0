//go:build chaos

package mutant

import (
	"os"
	"sync"
)

var live = sync.OnceValue(func() string { return os.Getenv(Env) })

// On reports whether name is the mutant named by KVOFFLOAD_MUTANT.
func On(name string) bool { return name == live() }
