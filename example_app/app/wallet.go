package app

import (
	"context"
	"database/sql"
	"errors"
	"strings"

	"github.com/claimbus/claimbus/commands"
	"github.com/claimbus/claimbus/lockstore"
	"github.com/claimbus/claimbus/middleware"
)

// Wallet holds money in one currency, in minor units (cents).
type Wallet struct {
	WalletID string `json:"wallet_id"`
	Currency string `json:"currency"`
	Balance  int64  `json:"balance"`
}

// Transfer moves Amount from one wallet to another once approved.
type Transfer struct {
	TransferID   string `json:"transfer_id"`
	FromWalletID string `json:"from_wallet_id"`
	ToWalletID   string `json:"to_wallet_id"`
	Amount       int64  `json:"amount"`
	Currency     string `json:"currency"`
	// State is "open", "approved" or "cancelled".
	State  string `json:"state"`
	Reason string `json:"reason,omitempty"`
}

// transferKeys names the lock of each transfer command: one command per
// transfer at a time, and a second one arriving meanwhile is rejected as
// locked.
func transferKeys(cmd any) []lockstore.Key {
	var id string
	switch c := cmd.(type) {
	case *commands.OpenTransfer:
		id = c.TransferID
	case *commands.ApproveTransfer:
		id = c.TransferID
	case *commands.CancelTransfer:
		id = c.TransferID
	default:
		return nil
	}
	return []lockstore.Key{{Namespace: NamespaceTransfer, ID: id}}
}

// AddWallet creates a wallet with an opening balance. It is set-up, not a
// command: it writes directly, after the checks the commands make of the
// same fields (commands.CheckID, commands.CheckCurrency), so that every
// wallet is one a transfer can name.
func (n *Node) AddWallet(ctx context.Context, w Wallet) error {
	if err := errors.Join(commands.CheckID("wallet_id", w.WalletID), commands.CheckCurrency("currency", w.Currency)); err != nil {
		return invalid(err)
	}
	if w.Balance < 0 || w.Balance > commands.MaxAmount {
		return middleware.Reject(middleware.CodeInvalid, "balance", "invalid balance: must be 0 to %d minor units", commands.MaxAmount)
	}
	added, err := n.db().exec(ctx,
		`INSERT INTO wallet (wallet_id, currency, balance) VALUES ($1, $2, $3) ON CONFLICT (wallet_id) DO NOTHING`,
		w.WalletID, w.Currency, w.Balance)
	if err != nil {
		return err
	}
	if added == 0 {
		return middleware.Reject(middleware.CodeAlreadyTaken, "wallet_id", "a wallet has this id")
	}
	return nil
}

// Wallet returns a wallet, or an error matching ErrNotFound.
func (n *Node) Wallet(ctx context.Context, id string) (Wallet, error) {
	w := Wallet{WalletID: id}
	err := n.db().queryRow(ctx, `SELECT currency, balance FROM wallet WHERE wallet_id = $1`, id).
		Scan(&w.Currency, &w.Balance)
	if errors.Is(err, sql.ErrNoRows) {
		return Wallet{}, middleware.Reject(CodeNotFound, "wallet_id", "no such wallet")
	}
	return w, err
}

// Transfer returns a transfer, or an error matching ErrNotFound.
func (n *Node) Transfer(ctx context.Context, id string) (Transfer, error) {
	return loadTransfer(ctx, n.db(), id)
}

// openTransfer handles OpenTransfer, holding the transfer's lock.
func (n *Node) openTransfer(ctx context.Context, c *commands.OpenTransfer) (Transfer, error) {
	t := Transfer{
		TransferID: c.TransferID, FromWalletID: c.FromWalletID, ToWalletID: c.ToWalletID,
		Amount: c.Amount, Currency: c.Currency, State: "open",
	}
	err := n.tx(ctx, func(ctx context.Context, q querier) error {
		for _, w := range []struct{ field, id string }{{"from_wallet_id", c.FromWalletID}, {"to_wallet_id", c.ToWalletID}} {
			var currency string
			err := q.queryRow(ctx, `SELECT currency FROM wallet WHERE wallet_id = $1`, w.id).Scan(&currency)
			switch {
			case errors.Is(err, sql.ErrNoRows):
				return middleware.Reject(CodeNotFound, w.field, "no such wallet")
			case err != nil:
				return err
			case currency != c.Currency:
				return middleware.Reject(middleware.CodeInvalid, "currency", "the wallet %s holds %s", w.id, currency)
			}
		}
		added, err := q.exec(ctx, `INSERT INTO transfer (transfer_id, from_wallet_id, to_wallet_id, amount, currency, state)
VALUES ($1, $2, $3, $4, $5, 'open') ON CONFLICT (transfer_id) DO NOTHING`,
			t.TransferID, t.FromWalletID, t.ToWalletID, t.Amount, t.Currency)
		if err == nil && added == 0 {
			return middleware.Reject(middleware.CodeAlreadyTaken, "transfer_id", "a transfer has this id")
		}
		return err
	})
	if err != nil {
		return Transfer{}, err
	}
	return t, nil
}

// approveTransfer handles ApproveTransfer, holding the transfer's lock:
// no cancel of the same transfer runs meanwhile. The money moves by
// atomic writes, which also keep two transfers from one wallet, each under
// its own lock, from overdrawing it: the debit only happens while the
// balance covers it.
func (n *Node) approveTransfer(ctx context.Context, c *commands.ApproveTransfer) (Transfer, error) {
	return n.decideTransfer(ctx, c.TransferID, "approved", "", moveMoney)
}

// cancelTransfer handles CancelTransfer, holding the transfer's lock.
func (n *Node) cancelTransfer(ctx context.Context, c *commands.CancelTransfer) (Transfer, error) {
	return n.decideTransfer(ctx, c.TransferID, "cancelled", strings.TrimSpace(c.Reason), nil)
}

// decideTransfer moves the open transfer id to state in one transaction:
// it loads the transfer, rejects one that is not open as not_open, runs
// effect (if any) and records the state.
func (n *Node) decideTransfer(ctx context.Context, id, state, reason string, effect func(ctx context.Context, q querier, t Transfer) error) (Transfer, error) {
	var t Transfer
	err := n.tx(ctx, func(ctx context.Context, q querier) error {
		var err error
		if t, err = loadTransfer(ctx, q, id); err != nil {
			return err
		}
		if t.State != "open" {
			return middleware.Reject(CodeNotOpen, "transfer_id", "the transfer is %s", t.State)
		}
		if effect != nil {
			if err := effect(ctx, q, t); err != nil {
				return err
			}
		}
		return setState(ctx, q, &t, state, reason)
	})
	if err != nil {
		return Transfer{}, err
	}
	return t, nil
}

// moveMoney debits t's amount from its source wallet, only while the
// balance covers it, and credits it to its destination. The rows are
// updated in wallet id order, so that two transfers in opposite directions
// cannot deadlock in PostgreSQL.
func moveMoney(ctx context.Context, q querier, t Transfer) error {
	debit := func() error {
		moved, err := q.exec(ctx, `UPDATE wallet SET balance = balance - $1 WHERE wallet_id = $2 AND balance >= $1`,
			t.Amount, t.FromWalletID)
		if err == nil && moved == 0 {
			return middleware.Reject(CodeInsufficientFunds, "amount", "the wallet %s holds less than the amount", t.FromWalletID)
		}
		return err
	}
	credit := func() error {
		_, err := q.exec(ctx, `UPDATE wallet SET balance = balance + $1 WHERE wallet_id = $2`, t.Amount, t.ToWalletID)
		return err
	}
	first, second := debit, credit
	if t.ToWalletID < t.FromWalletID {
		first, second = credit, debit
	}
	if err := first(); err != nil {
		return err
	}
	return second()
}

// setState moves an open transfer to state. The condition on the old state
// is the backstop under the lock: a transfer is decided once.
func setState(ctx context.Context, q querier, t *Transfer, state, reason string) error {
	changed, err := q.exec(ctx, `UPDATE transfer SET state = $2, reason = $3 WHERE transfer_id = $1 AND state = 'open'`,
		t.TransferID, state, reason)
	if err != nil {
		return err
	}
	if changed == 0 {
		return middleware.Reject(CodeNotOpen, "transfer_id", "the transfer was decided meanwhile")
	}
	t.State, t.Reason = state, reason
	return nil
}

// loadTransfer reads a transfer, or fails with a not_found rejection.
func loadTransfer(ctx context.Context, q querier, id string) (Transfer, error) {
	t := Transfer{TransferID: id}
	err := q.queryRow(ctx, `SELECT from_wallet_id, to_wallet_id, amount, currency, state, reason FROM transfer WHERE transfer_id = $1`, id).
		Scan(&t.FromWalletID, &t.ToWalletID, &t.Amount, &t.Currency, &t.State, &t.Reason)
	if errors.Is(err, sql.ErrNoRows) {
		return Transfer{}, middleware.Reject(CodeNotFound, "transfer_id", "no such transfer")
	}
	return t, err
}
