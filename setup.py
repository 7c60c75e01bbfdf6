"""The one compiled part of mapp: the shared-memory transport (mapp.transport._shm).

Everything else is declared in pyproject.toml. The extension needs only pybind11 and a
C++17 compiler (no torch, no CUDA headers): build isolation fetches pybind11 from the
[build-system] requirements.
"""

from pybind11.setup_helpers import Pybind11Extension, build_ext
from setuptools import setup

setup(
    ext_modules=[
        Pybind11Extension(
            "mapp.transport._shm",
            ["mapp/transport/_shm.cpp"],
            cxx_std=17,
            extra_compile_args=["-O2", "-pthread"],
            extra_link_args=["-pthread"],
            libraries=["rt"],
        )
    ],
    cmdclass={"build_ext": build_ext},
)
