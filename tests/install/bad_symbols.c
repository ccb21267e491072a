/* For check_symbols.py's self-test: globals without the s2_ prefix, one per
 * kind of definition (text, data, bss, read-only), beside names it passes. */
int leaked_data;
int leaked_data = 1;
int leaked_bss;
extern const int leaked_rodata;
const int leaked_rodata = 2;
void leaked_text(void);
int s2_allowed(void);
int S2_ALLOWED_TOO;
int S2_ALLOWED_TOO = 3;

static int file_local(int x)
{
    return x + leaked_data + leaked_rodata;
}

void leaked_text(void)
{
    leaked_bss = file_local(leaked_bss);
}

int s2_allowed(void)
{
    return file_local(S2_ALLOWED_TOO);
}
