package client

import (
	"context"
	"fmt"

	"github.com/kvoffload/kvoffload"
)

// Txn is an explicit transaction staged on the client: Put adds objects, Commit sends them as
// one BatchOffload with the transaction's ID, Abort discards them (nothing was sent). A Txn is
// for one goroutine.
type Txn struct {
	c     *Client
	id    kvoffload.TxnID
	objs  []kvoffload.Object
	state txnState
}

type txnState uint8

const (
	txnOpen       txnState = iota
	txnCommitting          // Commit was called and returned an error: it may be called again
	txnDone                // committed (results returned) or aborted
)

// Begin starts an explicit transaction with a fresh ID.
func (c *Client) Begin() *Txn { return &Txn{c: c, id: kvoffload.NewTxnID()} }

// ID is the transaction's ID.
func (t *Txn) ID() kvoffload.TxnID { return t.id }

// Put stages an object. value is not copied: it must not be modified until Commit returns.
// Put fails with ErrTxnDone once Commit or Abort was called.
func (t *Txn) Put(key string, value []byte) error {
	if t.state != txnOpen {
		return fmt.Errorf("%w: put %q", ErrTxnDone, key)
	}
	t.objs = append(t.objs, kvoffload.Object{Key: key, Value: value})
	return nil
}

// Commit sends the staged objects as one BatchOffload with the transaction's ID and returns
// one result per Put, in order. If it returns an error (for example ErrIndeterminate after its
// context ended), Commit may be called again: the same ID makes the retry exactly-once. After
// results were returned, Commit fails with ErrTxnDone.
func (t *Txn) Commit(ctx context.Context) ([]kvoffload.KeyResult, error) {
	if t.state == txnDone {
		return nil, fmt.Errorf("%w: commit", ErrTxnDone)
	}
	t.state = txnCommitting
	res, err := t.c.BatchOffload(ctx, t.id, t.objs)
	if err != nil {
		return nil, err
	}
	t.state, t.objs = txnDone, nil
	return res, nil
}

// Abort discards the staged objects; nothing was sent, so nothing is stored. Abort after a
// failed Commit does not undo what that Commit may have stored.
func (t *Txn) Abort() {
	t.state, t.objs = txnDone, nil
}
