package envelope

// validRFC3339 reports whether v is an RFC 3339 date-time in the profile Go's
// time.Parse(time.RFC3339, …) accepts, so that anything downstream that
// parses occurredAt with the standard library cannot fail on a value that
// passed here: YYYY-MM-DDTHH:MM:SS[.fraction](Z|±hh:mm), upper-case T and Z,
// a real calendar day, seconds 00–59. It is hand-written because time.Parse
// allocates for non-UTC offsets and is slower than needed on the hot path.
func validRFC3339(v []byte) bool {
	if len(v) < len("2006-01-02T15:04:05Z") {
		return false
	}
	year, ok1 := num(v[0:4], 0, 9999)
	month, ok2 := num(v[5:7], 1, 12)
	_, ok3 := num(v[11:13], 0, 23)
	_, ok4 := num(v[14:16], 0, 59)
	_, ok5 := num(v[17:19], 0, 59)
	if !(ok1 && ok2 && ok3 && ok4 && ok5 && v[4] == '-' && v[7] == '-' && v[10] == 'T' && v[13] == ':' && v[16] == ':') {
		return false
	}
	if _, ok := num(v[8:10], 1, daysIn(month, year)); !ok {
		return false
	}
	v = v[19:]
	if len(v) >= 2 && v[0] == '.' && isDigit(v[1]) {
		i := 2
		for i < len(v) && isDigit(v[i]) {
			i++
		}
		v = v[i:]
	}
	if len(v) == 1 {
		return v[0] == 'Z'
	}
	if len(v) != len("+07:00") || (v[0] != '+' && v[0] != '-') || v[3] != ':' {
		return false
	}
	_, ok1 = num(v[1:3], 0, 23)
	_, ok2 = num(v[4:6], 0, 59)
	return ok1 && ok2
}

func num(b []byte, min, max int) (int, bool) {
	x := 0
	for _, c := range b {
		if !isDigit(c) {
			return 0, false
		}
		x = x*10 + int(c-'0')
	}
	return x, min <= x && x <= max
}

func daysIn(month, year int) int {
	switch month {
	case 2:
		if year%4 == 0 && (year%100 != 0 || year%400 == 0) {
			return 29
		}
		return 28
	case 4, 6, 9, 11:
		return 30
	}
	return 31
}
