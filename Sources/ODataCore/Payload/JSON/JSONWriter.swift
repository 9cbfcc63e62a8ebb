/// Builds compact JSON text into a byte buffer.
struct JSONWriter {
    var bytes: [UInt8] = []
    private var needsComma: [Bool] = []

    init() { bytes.reserveCapacity(256) }

    var text: String { String(decoding: bytes, as: UTF8.self) }

    private mutating func separate() {
        if let last = needsComma.last {
            if last { bytes.append(UInt8(ascii: ",")) }
            needsComma[needsComma.count - 1] = true
        }
    }

    mutating func endObject() {
        bytes.append(UInt8(ascii: "}"))
        needsComma.removeLast()
    }

    mutating func endArray() {
        bytes.append(UInt8(ascii: "]"))
        needsComma.removeLast()
    }

    /// Writes a member name; the next value call writes its value.
    mutating func key(_ name: String) {
        separate()
        appendString(name)
        bytes.append(UInt8(ascii: ":"))
        // The value that follows must not write another comma.
        needsComma.append(false)
        pendingKey = true
    }

    private var pendingKey = false

    /// Writes a member name given as its JSON text with the colon (`"name":`), escaped already.
    mutating func key(escaped: [UInt8]) {
        separate()
        bytes.append(contentsOf: escaped)
        needsComma.append(false)
        pendingKey = true
    }

    /// The JSON text `"name":` of a member name.
    static func escapedKey(_ name: String) -> [UInt8] {
        var writer = JSONWriter()
        writer.appendString(name)
        writer.bytes.append(UInt8(ascii: ":"))
        return writer.bytes
    }

    /// Writes a string given as ASCII bytes (the caller has checked them); `clean`: no byte
    /// needs escaping.
    mutating func asciiString(_ ascii: UnsafeBufferPointer<UInt8>, clean: Bool) {
        beforeValue()
        bytes.append(0x22)
        if clean {
            bytes.append(contentsOf: ascii)
        } else {
            for c in ascii { appendEscaped(c) }
        }
        bytes.append(0x22)
    }

    private mutating func beforeValue() {
        if pendingKey {
            pendingKey = false
            needsComma.removeLast()
        } else {
            separate()
        }
    }

    mutating func string(_ s: String) {
        beforeValue()
        appendString(s)
    }

    /// Writes the member `"name":"value"` when there is a value.
    mutating func member(_ name: String, _ value: String?) {
        guard let value else { return }
        key(name)
        string(value)
    }

    mutating func raw(_ text: String) {
        beforeValue()
        bytes.append(contentsOf: text.utf8)
    }

    /// Writes a JSON number for an integer without going through `String`.
    mutating func integer(_ value: Int) {
        beforeValue()
        Digits.append(value, width: 1, to: &bytes)
    }

    /// Writes a JSON string whose content `append` writes as bytes that need no escaping.
    mutating func plainString(_ append: (inout [UInt8]) -> Void) {
        beforeValue()
        bytes.append(0x22)
        append(&bytes)
        bytes.append(0x22)
    }

    /// Writes JSON text (a number) that `append` writes as bytes.
    mutating func rawBytes(_ append: (inout [UInt8]) -> Void) {
        beforeValue()
        append(&bytes)
    }

    mutating func bool(_ b: Bool) { raw(b ? "true" : "false") }
    mutating func null() { raw("null") }

    mutating func objectStart() {
        beforeValue()
        bytes.append(UInt8(ascii: "{"))
        needsComma.append(false)
    }

    mutating func arrayStart() {
        beforeValue()
        bytes.append(UInt8(ascii: "["))
        needsComma.append(false)
    }

    mutating func value(_ value: JSONValue) {
        switch value {
        case .null: null()
        case .bool(let b): bool(b)
        case .number(let n): raw(n)
        case .string(let s): string(s)
        case .array(let items):
            arrayStart()
            for item in items { self.value(item) }
            endArray()
        case .object(let members):
            objectStart()
            for member in members {
                key(member.name)
                self.value(member.value)
            }
            endObject()
        }
    }

    private mutating func appendString(_ s: String) {
        bytes.append(0x22)
        // Most strings need no escaping: copy them whole.
        let clean = s.utf8.withContiguousStorageIfAvailable { utf8 -> Bool in
            for c in utf8 where c < 0x20 || c == 0x22 || c == 0x5C { return false }
            bytes.append(contentsOf: utf8)
            return true
        }
        if clean == true {
            bytes.append(0x22)
            return
        }
        for c in s.utf8 { appendEscaped(c) }
        bytes.append(0x22)
    }

    private mutating func appendEscaped(_ c: UInt8) {
        switch c {
        case 0x22: bytes.append(contentsOf: [0x5C, 0x22])
        case 0x5C: bytes.append(contentsOf: [0x5C, 0x5C])
        case 0x0A: bytes.append(contentsOf: [0x5C, UInt8(ascii: "n")])
        case 0x0D: bytes.append(contentsOf: [0x5C, UInt8(ascii: "r")])
        case 0x09: bytes.append(contentsOf: [0x5C, UInt8(ascii: "t")])
        case 0..<0x20:
            let hex = Array("0123456789abcdef".utf8)
            bytes.append(contentsOf: [0x5C, UInt8(ascii: "u"), UInt8(ascii: "0"), UInt8(ascii: "0"), hex[Int(c >> 4)], hex[Int(c & 0xF)]])
        default: bytes.append(c)
        }
    }
}
