/* sonde top's names (top.h): C++ names shortened to fit the FUNCTION column. The window
 * itself is the library's live view (include/sonde/view_source.h). */
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "top.h"

/* The length of the bracketed group at s (s[0] is '<' or '('), through its matching close;
 * 0 when it does not close. */
static size_t group_len(const char *s)
{
	int depth = 0;

	for (size_t i = 0; s[i]; i++) {
		if (s[i] == '<' || s[i] == '(')
			depth++;
		else if ((s[i] == '>' || s[i] == ')') && --depth == 0)
			return i + 1;
	}
	return 0;
}

const char *top_short_name(const char *name, char *out, size_t cap)
{
	char tmp[1024];
	size_t n = 0, len;

	for (const char *s = name; *s && n + 6 < sizeof(tmp);) {
		bool op = s - name >= 8 && !strncmp(s - 8, "operator", 8);
		if ((*s == '<' || *s == '(') && !op && strncmp(s, "(anonymous namespace)", 21) &&
		    (len = group_len(s)) > 2) {
			tmp[n++] = *s;
			memcpy(tmp + n, "...", 3);
			n += 3;
			tmp[n++] = s[len - 1];
			s += len;
			continue;
		}
		tmp[n++] = *s++;
		/* operator<<, operator(), operator<=: the operator's own brackets stay */
		if (op && (*s == '<' || *s == ')' || *s == '='))
			tmp[n++] = *s++;
	}
	tmp[n] = 0;
	if (cap < 4 || n < cap) {
		snprintf(out, cap, "%s", tmp);
		return out;
	}
	memcpy(out, tmp, cap - 4); /* still too long: cut, and say so */
	memcpy(out + cap - 4, "...", 4);
	return out;
}
