// GPT-2's byte-level alphabet: every byte is shown as one printable code point, so BPE
// vocabularies can be stored as JSON strings. Bytes 33..126, 161..172 and 174..255 stand for
// themselves; the other 68 map, in order, to U+0100.. (space is U+0120 'Ġ', newline U+010A 'Ċ').
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace oomb {

// The code point that shows byte b.
uint32_t byte_to_char(uint8_t b);
// The byte a code point shows, or -1 when it is not one of the 256.
int char_to_byte(uint32_t cp);
// Raw bytes of a byte-level string (valid UTF-8 of those code points); false if any code point
// is not one of the 256.
bool byte_level_decode(std::string_view s, std::string& bytes);

}  // namespace oomb
