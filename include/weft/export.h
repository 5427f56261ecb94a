/* WEFT_API marks what libweft.so exports: the C API of weft/weft.h and the C++ API of
 * weft/weft.hpp. Everything else in the library is built with hidden visibility. C99 and C++. */
#ifndef WEFT_EXPORT_H_
#define WEFT_EXPORT_H_

#if defined(__GNUC__) || defined(__clang__)
#define WEFT_API __attribute__((visibility("default")))
#else
#define WEFT_API
#endif

#endif /* WEFT_EXPORT_H_ */
