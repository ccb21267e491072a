#!/usr/bin/env python3
"""Install into a temporary DESTDIR and use what was installed as a user would:
the headers, the three shared libraries (exports equal to the public headers'
declarations, soname versions, RUNPATHs), the pkg-config files (a C program built and run
with pkg-config only: the .pc files are relocatable), the CMake package (the same program
through find_package(s2c) and s2c::s2c), libs2dist the same ways (a program of s2c/cp.h
without NCCL, through pkg-config and COMPONENTS dist), libs2c loaded by its absolute path with ctypes,
the documentation and the man page.  Nothing runs with LD_LIBRARY_PATH.

  test_install.py BUILD_DIR SOURCE_DIR
"""
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

PROGRAM = r'''
#include <s2c/layout.h>
#include <s2c/pattern.h>
#include <s2c/version.h>
#include <stdio.h>
#include <string.h>

int main(void)
{
    s2_ctx *ctx = s2_ctx_new();
    s2_local_stride_args a;
    s2_local_stride_args_default(&a);
    a.num_heads = 4;
    a.block_size = 16;
    s2_pattern_set *set = NULL;
    s2_layout *l = NULL;
    if (s2_pattern_from_args(ctx, &a, &set) != S2_OK ||
        s2_layout_new(ctx, s2_pattern_set_get(set, 0), 256, 256, &l) != S2_OK) {
        fprintf(stderr, "%s\n", s2_ctx_message(ctx));
        return 1;
    }
    /* head 0 keeps the diagonal block of query block 5 */
    printf("%s %s %d\n", s2_version(), S2C_VERSION_STRING, (int)s2_block_kept(s2_pattern_set_get(set, 0), 0, 5, 5));
    s2_layout_free(l);
    s2_pattern_set_free(set);
    s2_ctx_free(ctx);
    return strcmp(s2_version(), S2C_VERSION_STRING) != 0;
}
'''

# libs2dist without NCCL (S2C_LIBNCCL names a missing file): every call that needs it says so, arguments are
# checked first.
DIST_PROGRAM = r'''
#include <s2c/cp.h>
#include <stdio.h>

int main(void)
{
    s2_ctx *ctx = s2_ctx_new();
    int v = -1;
    s2_status a = s2_nccl_version(ctx, &v), b = s2_cp_exec_set_timing(ctx, NULL, true);
    printf("%s %s %d %d\n", s2_status_name(a), s2_status_name(b), v, s2_cp_comm_rank(NULL));
    s2_ctx_free(ctx);
    return !(a == S2_ERR_UNSUPPORTED && b == S2_ERR_NULL_ARG && v == 0 && s2_cp_comm_rank(NULL) == -1);
}
'''

DIST_CMAKE = '''cmake_minimum_required(VERSION 3.16)
project(s2c_dist_user C)
find_package(s2c 0.2 REQUIRED COMPONENTS dist)
find_package(s2c 0.2 QUIET COMPONENTS nosuch)
message(STATUS "component nosuch: ${s2c_FOUND}")
add_executable(app app.c)
target_link_libraries(app PRIVATE s2c::s2dist)
'''

CMAKE = '''cmake_minimum_required(VERSION 3.16)
project(s2c_user C)
find_package(s2c 0.2 REQUIRED)
add_executable(app app.c)
target_link_libraries(app PRIVATE s2c::s2c)
'''


def run(cmd, **kw):
    r = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if r.returncode != 0:
        print(f"FAILED ({r.returncode}): {' '.join(map(str, cmd))}\n{r.stdout}\n{r.stderr}")
        sys.exit(1)
    return r.stdout


def runpath(elf):
    """The DT_RUNPATH of an ELF file ("" when it has none)."""
    for line in run(["readelf", "-d", str(elf)]).splitlines():
        if "(RUNPATH)" in line:
            return line[line.index("[") + 1:line.rindex("]")]
    return ""


VERSIONS_CMAKE = """cmake_minimum_required(VERSION 3.19)
project(s2c_versions C)
foreach(req IN LISTS REQUESTS)
  find_package(s2c ${req} QUIET)
  message(STATUS "request ${req}: ${s2c_FOUND}")
  unset(s2c_FOUND)
endforeach()
"""


def version_requests(version):
    """find_package requests around the installed MAJOR.MINOR.PATCH and
    whether each is met: a single version of the same major and, under 1.0,
    minor, not newer; a range when the release lies in it."""
    ma, mi, pa = (int(x) for x in version.split(".")[:3])
    cases = {f"{ma}.{mi}": True, f"{ma}.{mi}.{pa}": True, f"{ma}.{mi}.{pa + 1}": False,
             f"{ma}.{mi + 1}": False, f"{ma + 1}.0": False,
             f"{ma}.{mi}...{ma}.{mi + 1}": True, f"{ma}.{mi}...<{ma}.{mi + 1}": True,
             f"{ma}.{mi + 1}...{ma}.{mi + 2}": False, f"{ma}.{mi}.{pa + 1}...{ma}.{mi + 1}": False}
    if mi > 0:
        cases.update({f"{ma}.{mi - 1}...{ma}.{mi + 1}": True, f"{ma}.{mi - 1}...<{ma}.{mi}": False,
                      f"{ma}.{mi - 1}": ma != 0})
    return cases


def one(root, pattern):
    found = sorted(root.rglob(pattern))
    if len(found) != 1:
        print(f"expected one {pattern} under {root}, found {[str(f) for f in found]}")
        sys.exit(1)
    return found[0]


def main():
    if os.environ.get("S2C_SANITIZED") == "1":
        print("sanitizer build: the installed libraries need the sanitizer runtime; skipped")
        return 77
    build, src = Path(sys.argv[1]).resolve(), Path(sys.argv[2]).resolve()
    failures = []
    with tempfile.TemporaryDirectory(prefix="s2c-install-") as tmp:
        dest = Path(tmp) / "dest"
        run(["meson", "install", "-C", str(build), "--destdir", str(dest), "--no-rebuild", "--quiet"])
        version_h = one(dest, "s2c/version.h")
        prefix = version_h.parent.parent.parent
        inc = version_h.parent.parent
        for h in (src / "include" / "s2c").glob("*.h"):
            if not (inc / "s2c" / h.name).is_file():
                failures.append(f"header {h.name} is not installed")
        libs = {}
        for lib in ("s2rt", "s2c", "s2dist"):
            so = one(dest, f"lib{lib}.so.*.*.*")
            libs[lib] = so
            soname = run(["objdump", "-p", str(so)])
            if f"SONAME               lib{lib}.so.0.2" not in soname:
                failures.append(f"lib{lib}: soname is not lib{lib}.so.0.2")
            if not (so.parent / f"lib{lib}.so").exists() or not (so.parent / f"lib{lib}.a").is_file():
                failures.append(f"lib{lib}: lib{lib}.so or lib{lib}.a missing")
            r = subprocess.run([sys.executable, str(src / "scripts" / "public_api.py"), "check", lib,
                                str(src / "include"), str(so)], capture_output=True, text=True)
            print(r.stdout.strip())
            if r.returncode != 0:
                failures.append(f"lib{lib}: exports differ from the public headers")
        for lib, so in libs.items():
            # every public declaration carries S2_API; the libraries are built with hidden visibility
            undecorated = [l for l in run(["nm", "-D", "--defined-only", str(so)]).splitlines() if " T s2_" not in l
                           and " s2_" in l]
            if undecorated:
                failures.append(f"lib{lib}: exported symbols that are not functions: {undecorated[:5]}")
        if "libLLVM" in run(["objdump", "-p", str(libs["s2rt"])]):
            failures.append("libs2rt needs LLVM")
        libdir = libs["s2rt"].parent
        for doc in ("share/doc/s2c/README.md", "share/doc/s2c/LICENSE", "share/doc/s2c/CHANGELOG.md",
                    "share/man/man1/s2c.1"):
            if not (prefix / doc).is_file():
                failures.append(f"{doc} is not installed")
        # libs2c finds libs2rt beside it; s2c finds the libraries from bin/
        for lib in ("s2c", "s2dist"):
            if runpath(libs[lib]) != "$ORIGIN":
                failures.append(f"lib{lib}: RUNPATH is {runpath(libs[lib])!r}, expected '$ORIGIN'")
        if "libnccl" in run(["objdump", "-p", str(libs["s2dist"])]):
            failures.append("libs2dist links NCCL (it must dlopen it)")
        s2c_exe = prefix / "bin" / "s2c"
        exe_rp = runpath(s2c_exe)
        if not exe_rp.startswith("$ORIGIN/") or \
                Path(exe_rp.replace("$ORIGIN", str(s2c_exe.parent), 1)).resolve() != libdir.resolve():
            failures.append(f"bin/s2c: RUNPATH is {exe_rp!r}, expected $ORIGIN/.. to {libdir.relative_to(prefix)}")
        pcdir = one(dest, "s2c.pc").parent
        env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
        env["PKG_CONFIG_PATH"] = str(pcdir)
        r = subprocess.run([sys.executable, str(src / "examples" / "installed" / "ctypes" / "s2c_ctypes.py"),
                            str(libdir), run(["pkg-config", "--modversion", "s2c"], env=env).strip()],
                           capture_output=True, text=True, env=env)
        print(r.stdout.strip())
        if r.returncode != 0:
            failures.append(f"libs2c by its path with ctypes: exit {r.returncode} {r.stderr.strip()}")
        app = Path(tmp) / "app.c"
        app.write_text(PROGRAM)
        flags = run(["pkg-config", "--cflags", "--libs", "s2c"], env=env).split()
        if any(str(src) in f or str(build) in f for f in flags):
            failures.append(f"pkg-config flags point into the source or build tree: {flags}")
        exe = Path(tmp) / "app"
        # pkg-config adds no rpath: a program outside the system's directories names the libdir
        rpath = "-Wl,-rpath," + run(["pkg-config", "--variable=libdir", "s2c"], env=env).strip()
        run([os.environ.get("CC", "cc"), "-std=c11", "-Wall", "-Werror", str(app), "-o", str(exe), rpath] + flags,
            env=env)
        out = run([str(exe)], env=env).split()
        if out[0] != out[1] or out[2] != "1":
            failures.append(f"pkg-config program printed {out}")
        print(f"pkg-config program: s2_version {out[0]}, S2C_VERSION_STRING {out[1]}")
        dist_app = Path(tmp) / "dist_app.c"
        dist_app.write_text(DIST_PROGRAM)
        dist_exe = Path(tmp) / "dist_app"
        dist_flags = run(["pkg-config", "--cflags", "--libs", "s2dist"], env=env).split()
        run([os.environ.get("CC", "cc"), "-std=c11", "-Wall", "-Werror", str(dist_app), "-o", str(dist_exe), rpath]
            + dist_flags, env=env)
        env_nccl = dict(env, S2C_LIBNCCL="/nonexistent/libnccl.so.2")
        dist_out = run([str(dist_exe)], env=env_nccl).strip()
        print(f"pkg-config s2dist program: {dist_out}")
        if shutil.which("cmake"):
            proj = Path(tmp) / "cm"
            proj.mkdir()
            (proj / "CMakeLists.txt").write_text(CMAKE)
            (proj / "app.c").write_text(PROGRAM)
            run(["cmake", "-S", str(proj), "-B", str(proj / "b"), f"-DCMAKE_PREFIX_PATH={prefix}"])
            run(["cmake", "--build", str(proj / "b")])
            out2 = run([str(proj / "b" / "app")], env=env).split()
            if out2 != out:
                failures.append(f"CMake program printed {out2}, pkg-config one {out}")
            print(f"CMake program: {' '.join(out2)}")
            dproj = Path(tmp) / "cmd"
            dproj.mkdir()
            (dproj / "CMakeLists.txt").write_text(DIST_CMAKE)
            (dproj / "app.c").write_text(DIST_PROGRAM)
            log = run(["cmake", "-S", str(dproj), "-B", str(dproj / "b"), f"-DCMAKE_PREFIX_PATH={prefix}"])
            if "-- component nosuch: 0" not in log and "-- component nosuch: FALSE" not in log:
                failures.append("find_package(s2c COMPONENTS nosuch) was not refused")
            run(["cmake", "--build", str(dproj / "b")])
            out3 = run([str(dproj / "b" / "app")], env=env_nccl).strip()
            if out3 != dist_out:
                failures.append(f"CMake s2dist program printed {out3!r}, pkg-config one {dist_out!r}")
            print(f"CMake s2dist program (COMPONENTS dist): {out3}")
            cases = version_requests(out[0])
            (proj / "v").mkdir()
            (proj / "v" / "CMakeLists.txt").write_text(VERSIONS_CMAKE)
            log = run(["cmake", "-S", str(proj / "v"), "-B", str(proj / "vb"), f"-DCMAKE_PREFIX_PATH={prefix}",
                       "-DREQUESTS=" + ";".join(cases)])
            wrong = [f"find_package(s2c {req}) with {out[0]} installed: expected {'found' if met else 'refused'}"
                     for req, met in cases.items() if f"-- request {req}: {1 if met else 0}\n" not in log]
            failures += wrong
            print(f"CMake version requests: {len(cases) - len(wrong)} of {len(cases)} met or refused as expected")
        else:
            print("cmake not found: the CMake package was not tried")
    for f in failures:
        print("FAIL:", f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
