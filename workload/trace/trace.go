// Package trace reads Mooncake-format request traces and turns them into the offload workload
// that the replay command and the tests drive: one batch per request, one key per 512-token
// block, each block's payload derived from its key.
//
// The trace format is the one published with Mooncake's FAST'25 paper: one JSON object per
// line with timestamp (ms), input_length, output_length and hash_ids, where hash_ids holds one
// chained prefix hash per block, so two requests that share a prefix share leading hash ids.
// A sample of the conversation trace (Apache-2.0, see NOTICE) is embedded so the replay works
// wherever the binary runs.
package trace

import (
	"bufio"
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
)

//go:embed conversation_sample.jsonl
var sample []byte

// Request is one line of a trace.
type Request struct {
	TimestampMS  int64   `json:"timestamp"`
	InputLength  int     `json:"input_length"`
	OutputLength int     `json:"output_length"`
	HashIDs      []int64 `json:"hash_ids"`
}

// Sample returns the embedded sample: the first 200 requests of Mooncake's
// conversation_trace.jsonl.
func Sample() []Request {
	reqs, err := Parse(bytes.NewReader(sample))
	if err != nil {
		panic(fmt.Sprintf("trace: embedded sample does not parse: %v", err))
	}
	return reqs
}

// Load reads a trace file.
func Load(path string) ([]Request, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("trace: %w", err)
	}
	defer f.Close()
	return Parse(f)
}

// Parse reads one JSON request per line; blank lines are skipped. An error names the line.
func Parse(r io.Reader) ([]Request, error) {
	var reqs []Request
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for line := 1; sc.Scan(); line++ {
		text := bytes.TrimSpace(sc.Bytes())
		if len(text) == 0 {
			continue
		}
		var req Request
		if err := json.Unmarshal(text, &req); err != nil {
			return nil, fmt.Errorf("trace: line %d: %w", line, err)
		}
		if req.HashIDs == nil {
			return nil, fmt.Errorf("trace: line %d: no hash_ids field (not a Mooncake-format trace?)", line)
		}
		reqs = append(reqs, req)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("trace: %w", err)
	}
	return reqs, nil
}

// DefaultModel is the model name used in keys when none is given.
const DefaultModel = "Qwen3-32B"

// Key returns the block key for a chained hash id in the format serving engines use:
// <model>@pcp0@dcp0@head_or_tp_rank:0@pp_rank:0@group:0@cache_role:kv@
// cache_family:full@<sha256 hex of the decimal hash id>.
func Key(model string, hashID int64) string {
	sum := sha256.Sum256([]byte(strconv.FormatInt(hashID, 10)))
	return model + "@pcp0@dcp0@head_or_tp_rank:0@pp_rank:0@group:0@cache_role:kv@cache_family:full@" +
		hex.EncodeToString(sum[:])
}

// Keys returns the keys of a request's blocks, in prefix order.
func Keys(model string, req Request) []string {
	keys := make([]string, len(req.HashIDs))
	for i, id := range req.HashIDs {
		keys[i] = Key(model, id)
	}
	return keys
}

// Payload returns size deterministic bytes for key: the AES-128-CTR keystream (zero IV)
// under the first 16 bytes of sha256(seed || key), so any reader can recompute what a writer
// stored. AES-CTR, which the CPU does in hardware, makes them at about 4 GB/s on one core of
// the 2-core VMs, where a ChaCha8 stream made 0.8 GB/s: a replay of 1.45 GB offered spent
// 1.8 s of CPU of a 5 s run generating payloads, CPU the store it measures did not get.
func Payload(seed uint64, key string, size int) []byte {
	buf := make([]byte, size)
	FillPayload(buf, seed, key)
	return buf
}

// PayloadSeed is sha256(seed || key), seed as 8 little-endian bytes: what key's payload is
// derived from (Payload keys AES-128 with its first 16 bytes).
func PayloadSeed(seed uint64, key string) [32]byte {
	h := sha256.New()
	var s [8]byte
	for i := range s {
		s[i] = byte(seed >> (8 * i))
	}
	h.Write(s[:])
	h.Write([]byte(key))
	var k [32]byte
	h.Sum(k[:0])
	return k
}

// FillPayload fills buf with the payload of key (see Payload).
func FillPayload(buf []byte, seed uint64, key string) {
	k := PayloadSeed(seed, key)
	block, err := aes.NewCipher(k[:16])
	if err != nil {
		panic("trace: " + err.Error()) // unreachable: the key is 16 bytes
	}
	var iv [aes.BlockSize]byte
	clear(buf)
	cipher.NewCTR(block, iv[:]).XORKeyStream(buf, buf)
}
