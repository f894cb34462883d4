/* Preloaded into a binary under test: an allocator that refuses glibc's
 * malloc settings, as AddressSanitizer's does (mallopt returns 0), so the
 * binary's "settings not applied" path runs in an ordinary build. */
int mallopt(int param, int value) {
  (void)param;
  (void)value;
  return 0;
}
