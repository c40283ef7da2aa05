/*
 * web_assets: the console's static files (web/), embedded at build time
 * by web/embed.cmake, so the page needs nothing installed beside the
 * binary and nothing from the network.
 */
#ifndef RMQ_WEB_ASSETS_H
#define RMQ_WEB_ASSETS_H

#include <stddef.h>

struct web_asset {
    const char *path;            /* "/index.html" */
    const char *type;            /* Content-Type */
    const unsigned char *data;
    size_t len;
};

extern const struct web_asset web_assets[];
extern const size_t web_assets_count;

#endif
