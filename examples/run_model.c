/* Example: load a model, run it on zeros, print output shapes. */
int main(void) { return 0; }
