"""``python -m rvv_attention``: the doctor (see :mod:`rvv_attention.doctor`)."""

import sys

from rvv_attention.doctor import main

sys.exit(main())
