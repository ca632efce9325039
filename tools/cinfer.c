/* cinfer CLI: run, inspect, ops, bench. */
int main(void) { return 0; }
