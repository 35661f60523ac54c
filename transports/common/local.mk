# SPDX-License-Identifier: BSD-3-Clause
# The plugin kit (transports/common/): what every in-tree transport shares (kit_bytes.h: the
# byte order of wire formats; kit_auth.h: constant-time MAC comparison; kit_fail.h: failure
# messages of connections and requests, and the first lines of a connection's failure;
# kit_settings.h: reading a setting of the plugin's own table; kit_req.h: the free list of
# request objects, the FIFO queues of requests and a conn's list of them). Header-only for now:
# no library to link, nothing exported.
noinst_HEADERS = transports/common/kit_bytes.h transports/common/kit_auth.h \
	transports/common/kit_fail.h transports/common/kit_settings.h transports/common/kit_req.h
