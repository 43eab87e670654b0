package main

import (
	"crypto/tls"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/pflag"

	"github.com/kvoffload/kvoffload/client"
	"github.com/kvoffload/kvoffload/internal/devca"
)

// apiCreds are the client-side flags for a client API served with --api-tls and/or
// --api-token-file (docs/security.md).
type apiCreds struct {
	ca        string // the cluster CA (PEM): use TLS and verify the member against it
	tokenFile string // a file whose first non-comment line is the bearer token
}

func (a *apiCreds) register(fl *pflag.FlagSet) {
	fl.StringVar(&a.ca, "tls-ca", "", "CA certificate (PEM) to verify members' API over TLS (for serve --api-tls); empty = plaintext")
	fl.StringVar(&a.tokenFile, "token-file", "", "file holding the bearer token for the API (for serve --api-token-file)")
}

// apply sets opt's TLS and Token from the flags.
func (a apiCreds) apply(opt *client.Options) error {
	if a.ca != "" {
		pool, err := devca.CAPool(a.ca)
		if err != nil {
			return fmt.Errorf("--tls-ca: %w", err)
		}
		opt.TLS = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS13}
	}
	if a.tokenFile != "" {
		b, err := os.ReadFile(a.tokenFile)
		if err != nil {
			return fmt.Errorf("--token-file: %w", err)
		}
		for _, line := range strings.Split(string(b), "\n") {
			if t := strings.TrimSpace(line); t != "" && !strings.HasPrefix(t, "#") {
				opt.Token = t
				break
			}
		}
		if opt.Token == "" {
			return fmt.Errorf("--token-file %s holds no token", a.tokenFile)
		}
	}
	return nil
}
