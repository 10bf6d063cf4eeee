package election

import "time"

// LastAnswer is when the member last answered one of this member's direct
// pings (the background loop pings every member every ProbeInterval), zero
// if it never did. It lets the agent report a silent holder (Meta.Silent)
// before memberlist's suspicion timeout runs out.
func (m *Membership) LastAnswer(name string) time.Time {
	v, ok := m.answeredAt.Load(name)
	if !ok {
		return time.Time{}
	}
	return v.(time.Time)
}
