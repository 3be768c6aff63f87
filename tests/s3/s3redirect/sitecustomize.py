"""Loaded by every Python process the S3 suite run starts (its PYTHONPATH names this directory): stores named by a
local path live on S3 there too (tests/helpers.py install_s3_redirect). Nothing happens without OBJSTORE_TEST_S3_BASE."""

import os
import sys

if os.environ.get("OBJSTORE_TEST_S3_BASE"):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    from helpers import install_s3_redirect

    install_s3_redirect()
