/* format.c — snprintf for shoal's own lines, without the C library's stdio.
 *
 * Every message, report and call-site name shoal writes goes through here:
 * the C library's snprintf may allocate (glibc's does for some formats) or
 * take locale locks, and on Windows it is the C runtime's or MinGW's, which
 * a Free Pascal program that links shoal's object has not started. This one
 * allocates nothing, takes no lock and is async-signal-safe.
 *
 * It knows what shoal's formats use: the conversions d i u x s c p and %%;
 * the flags '-' and '0'; a width and a precision (digits or '*'); the length
 * modifiers hh h l ll z t j. As snprintf: the result is always terminated
 * (capacity > 0) and the return value is the length the whole text needs. */
#include "core/internal.h"

#include <string.h>

typedef struct output_s {
  char *out;
  size_t capacity;
  size_t length; /* of the whole text, written or not */
} output_t;

static void put_char(output_t *output, char c) {
  if (output->length + 1 < output->capacity) output->out[output->length] = c;
  output->length++;
}

static void put_padding(output_t *output, char pad, size_t count) {
  for (size_t i = 0; i < count; i++) put_char(output, pad);
}

/* One field: `text` of `length` bytes, after `sign` (may be 0), padded to
 * `width` on the left (or right with '-'); zero padding goes after the sign. */
static void put_field(output_t *output, const char *sign, const char *text, size_t length,
                      size_t width, bool left, bool zero) {
  size_t sign_length = sign != NULL ? strlen(sign) : 0;
  size_t padding = width > length + sign_length ? width - length - sign_length : 0;
  if (!left && !zero) put_padding(output, ' ', padding);
  for (size_t i = 0; i < sign_length; i++) put_char(output, sign[i]);
  if (!left && zero) put_padding(output, '0', padding);
  for (size_t i = 0; i < length; i++) put_char(output, text[i]);
  if (left) put_padding(output, ' ', padding);
}

/* Digits of value in base 10 or 16, at least `minimum` of them, written
 * backwards from the end of `digits`; returns where they start. */
static char *digits_of(uintmax_t value, unsigned base, size_t minimum, char *end) {
  char *p = end;
  size_t count = 0;
  while (value != 0 || count < minimum) {
    *--p = "0123456789abcdef"[value % base];
    value /= base;
    count++;
  }
  return p;
}

enum length_modifier { LENGTH_INT, LENGTH_LONG, LENGTH_LONG_LONG, LENGTH_SIZE, LENGTH_MAX };

static intmax_t signed_argument(va_list *args, enum length_modifier length) {
  switch (length) {
  case LENGTH_LONG:
    return va_arg(*args, long);
  case LENGTH_LONG_LONG:
    return va_arg(*args, long long);
  case LENGTH_SIZE:
    return va_arg(*args, ptrdiff_t);
  case LENGTH_MAX:
    return va_arg(*args, intmax_t);
  default:
    return va_arg(*args, int);
  }
}

static uintmax_t unsigned_argument(va_list *args, enum length_modifier length) {
  switch (length) {
  case LENGTH_LONG:
    return va_arg(*args, unsigned long);
  case LENGTH_LONG_LONG:
    return va_arg(*args, unsigned long long);
  case LENGTH_SIZE:
    return va_arg(*args, size_t);
  case LENGTH_MAX:
    return va_arg(*args, uintmax_t);
  default:
    return va_arg(*args, unsigned int);
  }
}

/* A width or precision: digits, or '*' for an int argument. A negative
 * width asks for left alignment (*left set); a negative precision counts
 * as none given. */
static size_t read_count(const char **format, va_list *args, bool *given, bool *left) {
  *given = false;
  if (**format == '*') {
    (*format)++;
    int value = va_arg(*args, int);
    if (value < 0 && left == NULL) return 0;
    *given = true;
    if (value >= 0) return (size_t)value;
    *left = true;
    return (size_t)(-(long long)value);
  }
  size_t value = 0;
  while (**format >= '0' && **format <= '9') {
    value = value * 10 + (size_t)(**format - '0');
    (*format)++;
    *given = true;
  }
  return value;
}

int text_vformat(char *out, size_t capacity, const char *format, va_list arguments) {
  output_t output = {out, capacity, 0};
  va_list args;
  va_copy(args, arguments);
  while (*format != '\0') {
    if (*format != '%') {
      put_char(&output, *format++);
      continue;
    }
    format++;
    bool left = false, zero = false, has_width, has_precision = false;
    for (;; format++) {
      if (*format == '-')
        left = true;
      else if (*format == '0')
        zero = true;
      else
        break;
    }
    size_t width = read_count(&format, &args, &has_width, &left), precision = 0;
    if (*format == '.') {
      format++;
      precision = read_count(&format, &args, &has_precision, NULL);
      has_precision = has_precision || format[-1] != '*'; /* "%.d": precision 0 */
    }
    enum length_modifier length = LENGTH_INT;
    if (*format == 'h') {
      while (*format == 'h') format++; /* promoted to int anyway */
    } else if (*format == 'l') {
      format++;
      length = LENGTH_LONG;
      if (*format == 'l') format++, length = LENGTH_LONG_LONG;
    } else if (*format == 'z' || *format == 't') {
      format++;
      length = LENGTH_SIZE;
    } else if (*format == 'j') {
      format++;
      length = LENGTH_MAX;
    }
    char digits[32], *end = digits + sizeof digits;
    char conversion = *format != '\0' ? *format++ : '\0';
    size_t minimum = has_precision ? precision : 1;
    if (has_precision) zero = false;
    switch (conversion) {
    case 'd':
    case 'i': {
      intmax_t value = signed_argument(&args, length);
      uintmax_t magnitude = value < 0 ? (uintmax_t)0 - (uintmax_t)value : (uintmax_t)value;
      char *start = digits_of(magnitude, 10, minimum, end);
      put_field(&output, value < 0 ? "-" : NULL, start, (size_t)(end - start), width, left, zero);
      break;
    }
    case 'u':
    case 'x': {
      char *start =
          digits_of(unsigned_argument(&args, length), conversion == 'x' ? 16 : 10, minimum, end);
      put_field(&output, NULL, start, (size_t)(end - start), width, left, zero);
      break;
    }
    case 'p': {
      char *start = digits_of((uintptr_t)va_arg(args, void *), 16, 1, end);
      put_field(&output, "0x", start, (size_t)(end - start), width, left, false);
      break;
    }
    case 'c': {
      char c = (char)va_arg(args, int);
      put_field(&output, NULL, &c, 1, width, left, false);
      break;
    }
    case 's': {
      const char *text = va_arg(args, const char *);
      if (text == NULL) text = "(null)";
      size_t text_length = 0;
      while (text[text_length] != '\0' && (!has_precision || text_length < precision))
        text_length++;
      put_field(&output, NULL, text, text_length, width, left, false);
      break;
    }
    case '%':
      put_char(&output, '%');
      break;
    default: /* not one of shoal's formats: shown as it is */
      put_char(&output, '%');
      if (conversion != '\0') put_char(&output, conversion);
      break;
    }
  }
  va_end(args);
  if (capacity > 0) out[output.length < capacity ? output.length : capacity - 1] = '\0';
  return output.length > INT32_MAX ? INT32_MAX : (int)output.length;
}

int text_format(char *out, size_t capacity, const char *format, ...) {
  va_list args;
  va_start(args, format);
  int length = text_vformat(out, capacity, format, args);
  va_end(args);
  return length;
}
