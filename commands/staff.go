package commands

// CreateStaff creates a member of staff. Email is unique among staff
// (case-insensitively): the uniqueness middleware claims it before the
// handler runs.
type CreateStaff struct {
	StaffID string `json:"staff_id"`
	Email   string `json:"email"`
	Name    string `json:"name"`
	// IdempotencyKey, when set, makes the command idempotent: every
	// command with the same key gets the answer of the first (see package
	// idempotency). The example app sets it from the Idempotency-Key
	// header. Empty: none.
	IdempotencyKey string `json:"idempotency_key,omitempty"`
}

// Validate returns a *FieldError for the first invalid field: staff_id
// present, email one bare address, name present, sizes within the limits, an idempotency key, when set,
// as CheckIdempotencyKey takes it.
func (c *CreateStaff) Validate() error {
	return firstError(
		checkID("staff_id", c.StaffID),
		checkEmail("email", c.Email),
		checkText("name", c.Name, maxNameLen, true),
		checkIdempotencyKey("idempotency_key", c.IdempotencyKey),
	)
}
