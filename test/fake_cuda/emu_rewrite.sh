#!/bin/sh
# emu_rewrite.sh FILE — prints FILE as the emulated build compiles it (Makefile, build/emu): every
# kernel<<<grid, block, smem, stream>>>(...) launch becomes FAKE_LAUNCH(kernel, grid, block, smem, stream)(...),
# and every __shared__ declaration line gets a FAKE_SHARED_FRESH(name); per array it declares (test/fake_cuda/
# fake_device.h: a block's shared memory then starts as NaN bytes, as garbage on a GPU). It rewrites nothing else.
sed 's/\([A-Za-z_0-9]*\)<<<\([^>]*\)>>>/FAKE_LAUNCH(\1, \2)/g' "$1" | awk '
/__shared__/ && !/#define/ {
    code = $0; sub(/\/\/.*/, "", code)              # the declaration without its comment
    rest = code; fresh = ""
    while (match(rest, /[A-Za-z_][A-Za-z_0-9]*\[/)) {  # each name directly followed by its first [
        fresh = fresh " FAKE_SHARED_FRESH(" substr(rest, RSTART, RLENGTH - 1) ");"
        rest = substr(rest, RSTART + RLENGTH)
        sub(/^[^,;]*/, "", rest)                    # skip this array'"'"'s dimensions, up to the next name
    }
    print code fresh; next
}
{ print }'
