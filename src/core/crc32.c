/* crc32: libdeflate's zlib-compatible CRC-32 (see crc32.h). */
#include "core/crc32.h"

#include <libdeflate.h>

uint32_t
rmq_crc32(uint32_t crc, const void *p, size_t n)
{
    return libdeflate_crc32(crc, p, n);
}
