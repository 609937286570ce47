/* glibc 2.38's C23 strtol/sscanf entry points for binaries built on newer
   systems; on the inputs live555 parses they behave as the C99 ones. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
long __isoc23_strtol(const char *s, char **end, int base) { return strtol(s, end, base); }
int __isoc23_sscanf(const char *s, const char *fmt, ...) {
  va_list ap; va_start(ap, fmt); int r = vsscanf(s, fmt, ap); va_end(ap); return r;
}
