"""Builds weft_torch against an installed weft, found with pkg-config (PKG_CONFIG_PATH=
PREFIX/lib/pkgconfig), and the PyTorch it is installed beside:

    pip install --no-build-isolation ./python

scripts/test-torch installs weft into its virtual environment and builds this there."""

import subprocess

from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CppExtension


def pkg_config(flag):
    try:
        out = subprocess.run(["pkg-config", flag, "weft"], check=True, capture_output=True,
                             text=True).stdout
    except (OSError, subprocess.CalledProcessError) as e:
        raise SystemExit("weft_torch: pkg-config cannot find weft; install it (cmake --install "
                         "build --prefix PREFIX) and set PKG_CONFIG_PATH=PREFIX/lib/pkgconfig"
                         f" ({e})")
    return [f[2:] for f in out.split()]


# Only the C API is used (weft/weft.h): its ABI is independent of the C++ standard library
# and Abseil that PyTorch and weft were built with.
libdirs = pkg_config("--libs-only-L")
setup(
    name="weft_torch",
    version="0.1.0",
    description="weft as a torch.distributed backend",
    packages=["weft_torch"],
    ext_modules=[CppExtension(
        "weft_torch._C",
        ["weft_torch/csrc/backend.cc", "weft_torch/csrc/module.cc"],
        include_dirs=pkg_config("--cflags-only-I"),
        library_dirs=libdirs,
        runtime_library_dirs=libdirs,
        libraries=["weft"],
        extra_compile_args=["-O2"],
    )],
    cmdclass={"build_ext": BuildExtension},
)
