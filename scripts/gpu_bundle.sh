#!/usr/bin/env bash
# Pack every GPU test program, bench and example into ONE static multi-call
# executable, to run the GPU suites on a machine without LLVM:
#
#   scripts/gpu_bundle.sh BUILD_DIR OUT_DIR
#
# BUILD_DIR is configured when it is not yet (a release build with LLVM,
# libstdc++, zlib, zstd, libyaml and Check linked statically), or switched to
# those options.  Each program links LLVM statically (tens of MB each), so the
# programs are compiled again from their meson compile commands with
# -Dmain=NAME_main, each made into one relocatable object that exports only
# NAME_main, and linked once with the project's static libraries behind a
# small dispatcher (argv[0]'s basename, or `s2c-gpu NAME ARGS...`).
#
# OUT_DIR receives:
#   s2c-gpu.xz     the stripped executable, xz-compressed
#   data/...       files made at build time that the programs read (the
#                  embed example's cubins), at their paths in BUILD_DIR
#   programs.txt   the commit, the programs, and the meson GPU tests
# Copy OUT_DIR together with the source tree (the tests read patterns and
# data from it) and run scripts/gpu_suite.sh OUT_DIR from the tree's root.
set -euo pipefail

if [ $# -ne 2 ]; then
    echo "usage: $0 BUILD_DIR OUT_DIR" >&2
    exit 2
fi
build=$(realpath -m "$1")
out=$(realpath -m "$2")
cd "$(dirname "$0")/.."
root=$(pwd)

opts=(-Dstatic_llvm=true -Dprefer_static=true -Dbuildtype=release -Dtests=enabled
      # gcc -O3 gives a false maybe-uninitialized in patterns/parse.c
      -Dwerror=false)
if [ ! -f "$build/build.ninja" ]; then
    meson setup "$build" "${opts[@]}"
else
    # switch the options only where they differ (a reconfigure rebuilds)
    have=$(meson introspect --buildoptions "$build" | python3 -c '
import json, sys
v = {o["name"]: o["value"] for o in json.load(sys.stdin)}
print(" ".join("-D%s=%s" % (k, str(v.get(k)).lower()) for k in
               ("static_llvm", "prefer_static", "buildtype", "tests", "werror")))')
    if [ "$have" != "${opts[*]}" ]; then
        echo "gpu_bundle: $build has $have; switching" >&2
        meson configure "$build" "${opts[@]}"
    fi
fi

obj=$build/gpu-bundle
mkdir -p "$obj" "$out"

# Everything about the programs comes from the build directory: the GPU
# tests (suite gpu), the executables under bench/ and examples/, their
# compile commands and their link commands.
# regenerate first when a meson.build changed, or meson-info/ lists old targets
ninja -C "$build" build.ninja >/dev/null
python3 - "$build" "$obj" "$root" <<'EOF'
import json, os, shlex, subprocess, sys

build, obj, root = sys.argv[1:4]

def load(name):
    with open(os.path.join(build, 'meson-info', name)) as f:
        return json.load(f)

def run(cmd, **kw):
    r = subprocess.run(cmd, **kw)
    if r.returncode != 0:
        sys.exit('gpu_bundle: failed: ' + ' '.join(shlex.quote(c) for c in cmd))
    return r

tests = load('intro-tests.json')
targets = load('intro-targets.json')
by_id = {t['id']: t for t in targets}
by_file = {t['filename'][0]: t for t in targets if t['filename']}

programs = []   # executable paths, absolute
data = []       # build-time files the GPU tests depend on
gpu_tests = []
for t in tests:
    if not any(s.split(':')[-1] == 'gpu' for s in t['suite']):
        continue
    exe = t['cmd'][0]
    if exe not in by_file or by_file[exe]['type'] != 'executable':
        sys.exit('gpu_bundle: GPU test %s does not run a program of this build: %s' % (t['name'], exe))
    if exe not in programs:
        programs.append(exe)
    gpu_tests.append(t)
    for d in t['depends']:
        tg = by_id.get(d)
        if tg and tg['type'] == 'custom':
            data += [f for f in tg['filename'] if f not in data]
for tg in targets:
    where = os.path.relpath(tg['defined_in'], root).split(os.sep)[0]
    if tg['type'] == 'executable' and where in ('bench', 'examples') and tg['filename'][0] not in programs:
        programs.append(tg['filename'][0])

names = [os.path.basename(p) for p in programs]
if len(set(names)) != len(names):
    sys.exit('gpu_bundle: two programs share a name: %s' % sorted(names))

compdb = json.load(open(os.path.join(build, 'compile_commands.json')))

def link_args(rel):
    cmds = run(['ninja', '-C', build, '-t', 'commands', rel], capture_output=True, text=True).stdout
    argv = shlex.split(cmds.strip().splitlines()[-1])
    cc, args, i = argv[0], [], 1
    while i < len(argv):
        a = argv[i]
        if a == '-o':
            i += 2
            continue
        if not (a.endswith('.o') and a.startswith(rel + '.p/')):
            args.append(a)
        i += 1
    return cc, args

# the libraries (and files) to build first: nothing else of the build is needed
lib_args = []
cc = None
for p in programs:
    rel = os.path.relpath(p, build)
    cc, args = link_args(rel)
    for a in args:
        if a not in lib_args:
            lib_args.append(a)
need = [a for a in lib_args if a.endswith('.a') and not os.path.isabs(a)]
need += [os.path.relpath(f, build) for f in data]
print('gpu_bundle: building %s' % ' '.join(need), flush=True)
run(['ninja', '-C', build] + need)

def src_define(a):
    """-DNAME="/abs/path/in/the/tree" -> relative to the tree's root (where
    the programs run), so that no path of this machine is baked in."""
    if not a.startswith('-D') or '="' not in a:
        return a
    k, v = a.split('=', 1)
    path = v[1:-1]
    if path == root or path.startswith(root + '/'):
        return '%s="%s"' % (k, os.path.relpath(path, root))
    return a

objects = []
for p, name in zip(programs, names):
    rel = os.path.relpath(p, build)
    entries = [e for e in compdb if e['output'].startswith(rel + '.p/')]
    if not entries:
        sys.exit('gpu_bundle: no compile commands for %s' % rel)
    d = os.path.join(obj, name)
    os.makedirs(d, exist_ok=True)
    outs = []
    for e in entries:
        argv = shlex.split(e['command'])
        new, i = [], 0
        while i < len(argv):
            a = argv[i]
            if a in ('-MQ', '-MF'):
                i += 2
                continue
            if a == '-MD':
                i += 1
                continue
            if a == '-o':
                o = os.path.join(d, os.path.basename(argv[i + 1]))
                new += ['-o', o]
                outs.append(o)
                i += 2
                continue
            if not a.startswith('-fdiagnostics-color'):
                new.append(src_define(a))
            i += 1
        # after the build's flags, so that these win
        new += ['-Dmain=%s_main' % name, '-Wno-missing-prototypes', '-Werror=return-type']
        run(new, cwd=e['directory'])
    # one object per program that exports NAME_main only: the programs'
    # own globals (and the harness each links) cannot clash
    o = os.path.join(obj, name + '.o')
    run(['ld', '-r', '-o', o] + outs)
    run(['objcopy', '--keep-global-symbol=%s_main' % name, o])
    objects.append(o)
    print('gpu_bundle: %s (%s)' % (name, rel), flush=True)

with open(os.path.join(obj, 'main.c'), 'w') as f:
    f.write('/* generated by scripts/gpu_bundle.sh */\n#include <stdio.h>\n#include <string.h>\n\n')
    for n in names:
        f.write('int %s_main(int argc, char **argv);\n' % n)
    f.write('\nstatic const struct {\n    const char *name;\n    int (*main)(int, char **);\n} programs[] = {\n')
    for n in names:
        f.write('    {"%s", %s_main},\n' % (n, n))
    f.write('''};
#define NUM_PROGRAMS (sizeof programs / sizeof programs[0])

static int find(const char *name)
{
    for (size_t i = 0; i < NUM_PROGRAMS; i++)
        if (!strcmp(programs[i].name, name))
            return (int)i;
    return -1;
}

int main(int argc, char **argv)
{
    const char *base = argc > 0 ? strrchr(argv[0], '/') : NULL;
    base = base ? base + 1 : argc > 0 ? argv[0] : "";
    int i = find(base);
    if (i >= 0)
        return programs[i].main(argc, argv);
    if (argc > 1 && (i = find(argv[1])) >= 0)
        return programs[i].main(argc - 1, argv + 1);
    if (argc > 1 && !strcmp(argv[1], "--list")) {
        for (size_t j = 0; j < NUM_PROGRAMS; j++)
            printf("%s\\n", programs[j].name);
        return 0;
    }
    fprintf(stderr, "usage: %s PROGRAM [ARGS...]  (or call it through a link named PROGRAM)\\n"
                    "       %s --list\\nprograms:", base, base);
    for (size_t j = 0; j < NUM_PROGRAMS; j++)
        fprintf(stderr, " %s", programs[j].name);
    fprintf(stderr, "\\n");
    return 2;
}
''')
run([cc, '-std=c11', '-O2', '-Wall', '-Wextra', '-Werror', '-c', '-o', os.path.join(obj, 'main.o'),
     os.path.join(obj, 'main.c')])
end = [a for a in lib_args if a == '-Wl,--end-group']
args = [a for a in lib_args if a != '-Wl,--end-group'] + end
print('gpu_bundle: linking %d programs' % len(names), flush=True)
run([cc, '-o', os.path.join(obj, 's2c-gpu'), os.path.join(obj, 'main.o')] + objects + args, cwd=build)

with open(os.path.join(obj, 'programs.txt'), 'w') as f:
    f.write('programs: %s\n' % ' '.join(names))
    f.write('data: %s\n' % ' '.join(os.path.relpath(x, build) for x in data))
    f.write('meson GPU tests (name, program, args, timeout):\n')
    for t in gpu_tests:
        f.write('  %s %s %s %s\n' % (t['name'], os.path.basename(t['cmd'][0]),
                                    ' '.join(t['cmd'][1:]) or '-', t['timeout']))
with open(os.path.join(obj, 'data.txt'), 'w') as f:
    for x in data:
        f.write(os.path.relpath(x, build) + '\n')
EOF

strip -o "$obj/s2c-gpu.stripped" "$obj/s2c-gpu"
# what it needs of the machine it runs on: shared libraries and glibc version
needed=$(readelf -d "$obj/s2c-gpu.stripped" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | paste -sd ' ')
glibc=$(objdump -T "$obj/s2c-gpu.stripped" | grep -o 'GLIBC_[0-9.]*' | sort -uV | tail -1)

rm -rf "$out/data" "$out/s2c-gpu.xz"
xz -T0 -6 -c "$obj/s2c-gpu.stripped" >"$out/s2c-gpu.xz"
while read -r f; do
    mkdir -p "$out/data/$(dirname "$f")"
    cp "$build/$f" "$out/data/$f"
done <"$obj/data.txt"
{
    echo "commit: $(git rev-parse HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD 2>/dev/null || echo ' (with local changes)')"
    echo "built: $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -m)"
    echo "needs: $needed; $glibc or newer"
    cat "$obj/programs.txt"
} >"$out/programs.txt"

size=$(stat -c %s "$out/s2c-gpu.xz")
echo "gpu_bundle: $(stat -c %s "$obj/s2c-gpu.stripped" | numfmt --to=iec) stripped, needs $needed ($glibc)"
echo "gpu_bundle: $out/s2c-gpu.xz $(numfmt --to=iec "$size") ($size bytes); $out in all: $(du -sh "$out" | cut -f1)"
