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
	// insecureToken sends the token without TLS (a loopback or trusted network).
	insecureToken bool
}

func (a *apiCreds) register(fl *pflag.FlagSet) {
	fl.StringVar(&a.ca, "tls-ca", "", "CA certificate (PEM) to verify members' API over TLS (for serve --api-tls); empty = plaintext")
	fl.StringVar(&a.tokenFile, "token-file", "", "file holding the bearer token for the API (for serve --api-token-file); needs --tls-ca or --insecure-token")
	fl.BoolVar(&a.insecureToken, "insecure-token", false, "send the token without TLS (loopback or a network you trust)")
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
		if a.ca == "" && !a.insecureToken {
			// the client would refuse it too, but in its option names and only once dialing
			return fmt.Errorf("--token-file: the token would be sent in plaintext; give --tls-ca, or --insecure-token on a network you trust")
		}
		tokens, err := readTokens(a.tokenFile)
		if err != nil {
			return fmt.Errorf("--token-file: %w", err)
		}
		opt.Token, opt.InsecureToken = tokens[0], a.insecureToken
	}
	return nil
}

// readTokens reads a token file: one bearer token per line; blank lines and lines starting
// with # are skipped. A file holding no token is an error.
func readTokens(path string) ([]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var tokens []string
	for _, line := range strings.Split(string(b), "\n") {
		if t := strings.TrimSpace(line); t != "" && !strings.HasPrefix(t, "#") {
			tokens = append(tokens, t)
		}
	}
	if len(tokens) == 0 {
		return nil, fmt.Errorf("%s holds no token", path)
	}
	return tokens, nil
}
