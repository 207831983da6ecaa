package commands

// CreateStaff creates a member of staff. Email is unique among staff
// (case-insensitively): the uniqueness middleware claims it before the
// handler runs.
type CreateStaff struct {
	StaffID string `json:"staff_id"`
	Email   string `json:"email"`
	Name    string `json:"name"`
}

// Validate returns a *FieldError for the first invalid field: staff_id
// present, email one bare address, name present, sizes within the limits.
func (c *CreateStaff) Validate() error {
	return firstError(
		checkID("staff_id", c.StaffID),
		checkEmail("email", c.Email),
		checkText("name", c.Name, MaxNameLen, true),
	)
}
