package providers

import "time"

// Clock is a backend's time source. The zero value (nil) reads the wall clock; tests set a
// fixed or stepped one in the backend's options.
type Clock func() time.Time

// Now returns the clock's time.
func (c Clock) Now() time.Time {
	if c == nil {
		return time.Now()
	}
	return c()
}
