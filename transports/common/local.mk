# SPDX-License-Identifier: BSD-3-Clause
# The plugin kit (transports/common/): what every in-tree transport shares (kit_bytes.h: the
# byte order of wire formats). Header-only for now: no library to link, nothing exported.
noinst_HEADERS = transports/common/kit_bytes.h
