package commands

// OpenTransfer opens a transfer of Amount (in minor units of Currency, such
// as cents) from one wallet to another. It waits for ApproveTransfer or
// CancelTransfer.
type OpenTransfer struct {
	TransferID   string `json:"transfer_id"`
	FromWalletID string `json:"from_wallet_id"`
	ToWalletID   string `json:"to_wallet_id"`
	Amount       int64  `json:"amount"`
	Currency     string `json:"currency"`
}

// Validate returns a *FieldError for the first invalid field: ids present,
// two distinct wallets, an amount from 1 to MaxAmount, an ISO 4217 code.
func (c *OpenTransfer) Validate() error {
	var distinct *FieldError
	if c.FromWalletID != "" && c.FromWalletID == c.ToWalletID {
		distinct = fieldErr("to_wallet_id", "is the wallet the transfer is from")
	}
	return firstError(
		checkID("transfer_id", c.TransferID),
		checkID("from_wallet_id", c.FromWalletID),
		checkID("to_wallet_id", c.ToWalletID),
		distinct,
		checkAmount("amount", c.Amount),
		checkCurrency("currency", c.Currency),
	)
}

// ApproveTransfer approves an open transfer: the money moves.
type ApproveTransfer struct {
	TransferID string `json:"transfer_id"`
}

// Validate returns a *FieldError when transfer_id is missing or invalid.
func (c *ApproveTransfer) Validate() error {
	return firstError(checkID("transfer_id", c.TransferID))
}

// CancelTransfer cancels an open transfer; Reason is optional.
type CancelTransfer struct {
	TransferID string `json:"transfer_id"`
	Reason     string `json:"reason,omitempty"`
}

// Validate returns a *FieldError for the first invalid field: transfer_id
// present, reason of at most 500 bytes.
func (c *CancelTransfer) Validate() error {
	return firstError(
		checkID("transfer_id", c.TransferID),
		checkText("reason", c.Reason, maxReasonLen, false),
	)
}

// checkAmount checks an amount in minor units: from 1 to MaxAmount.
func checkAmount(field string, amount int64) *FieldError {
	switch {
	case amount <= 0:
		return fieldErr(field, "must be positive (in minor units, such as cents)")
	case amount > MaxAmount:
		return fieldErr(field, "is over the limit of %d minor units", MaxAmount)
	}
	return nil
}

// CheckCurrency reports, as a *FieldError for field, a value that is not
// a currency code of ISO 4217 (see Currencies).
func CheckCurrency(field, code string) error {
	if err := checkCurrency(field, code); err != nil {
		return err
	}
	return nil
}

func checkCurrency(field, code string) *FieldError {
	if len(code) != 3 {
		return fieldErr(field, "must be a three-letter ISO 4217 code, such as EUR")
	}
	for i := range len(code) {
		if code[i] < 'A' || code[i] > 'Z' {
			return fieldErr(field, "must be a three-letter ISO 4217 code in upper case, such as EUR")
		}
	}
	if !isCurrency(code) {
		return fieldErr(field, "is not the ISO 4217 code of a currency")
	}
	return nil
}
