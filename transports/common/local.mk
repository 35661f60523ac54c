# SPDX-License-Identifier: BSD-3-Clause
# The plugin kit (transports/common/): what every in-tree transport shares (kit_bytes.h: the
# byte order of wire formats; kit_auth.h: constant-time MAC comparison; kit_fail.h: failure
# messages of connections and requests, the first lines of a connection's failure, and the first
# checks of connect, accept, isend and irecv; kit_settings.h: reading a setting of the plugin's
# own table; kit_wake.h: the wake-up rule of ep_fd and its eventfd; kit_objs.h: the fields of
# endpoints and connections and the lists that hold them; kit_table.h: the exported table and
# ep_fd, written from the plugin's function prefix; kit_req.h: the free list of request objects,
# the FIFO queues of requests and a conn's list of live requests). Header-only for now: no
# library to link, nothing exported.
noinst_HEADERS = transports/common/kit_bytes.h transports/common/kit_auth.h \
	transports/common/kit_fail.h transports/common/kit_settings.h \
	transports/common/kit_wake.h transports/common/kit_objs.h transports/common/kit_table.h \
	transports/common/kit_req.h
