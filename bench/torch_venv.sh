# Sourced by the bench scripts whose peers run on PyTorch: `torch_venv VENV` makes VENV with
# PyTorch (CPU) and sentence-transformers, pinned, when it does not exist yet. The PyPI
# wheel of torch is built with CUDA; its CUDA libraries are separate packages, not needed on
# CPU, so the wheel goes in without them and its CPU dependencies are named here.
torch_venv() {
  local venv=$1
  [ -x "$venv/bin/python" ] && return 0
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --no-deps "torch==2.15.0"
  "$venv/bin/pip" install --quiet sympy networkx jinja2 filelock fsspec typing-extensions "numpy==2.4.6"
  "$venv/bin/pip" install --quiet "sentence-transformers==6.2.0" "transformers==5.24.0"
}
