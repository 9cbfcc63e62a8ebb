/// Somewhere bytes are written one at a time: a growing `[UInt8]`, or a ``ByteSlot`` of fixed
/// size that a hot loop reuses row after row. The text forms of values (the store's stored
/// forms) are written through it, once for both.
package protocol ByteSink {
    /// How many bytes have been written.
    var count: Int { get }
    /// Writes one more byte.
    mutating func append(_ byte: UInt8)
    /// Writes `value` in decimal as ``Digits/append(_:width:to:)-(Int,_,_)`` does.
    mutating func appendDigits(_ value: Int, width: Int)
    /// Writes `count` bytes that `write` stores at the pointer it is given (all of them).
    mutating func appendBytes(count: Int, _ write: (UnsafeMutablePointer<UInt8>) -> Void)
}

extension Array: ByteSink where Element == UInt8 {
    package mutating func appendDigits(_ value: Int, width: Int) { Digits.append(value, width: width, to: &self) }

    package mutating func appendBytes(count: Int, _ write: (UnsafeMutablePointer<UInt8>) -> Void) {
        let start = self.count
        append(contentsOf: repeatElement(0, count: count))
        withUnsafeMutableBufferPointer { buffer in
            if let base = buffer.baseAddress { write(base + start) }
        }
    }
}

/// A fixed-size run of bytes that someone else owns (it is neither allocated nor freed here).
/// Writing past its end writes nothing and sets ``overflowed``: the caller then writes the
/// value into an array instead.
package struct ByteSlot: ByteSink {
    /// The first byte.
    package let base: UnsafeMutablePointer<UInt8>
    /// How many bytes fit.
    package let capacity: Int
    package var count = 0
    /// Whether a byte did not fit; the bytes written are then incomplete.
    package var overflowed = false

    /// A slot over `capacity` bytes at `base`, empty.
    package init(base: UnsafeMutablePointer<UInt8>, capacity: Int) {
        self.base = base
        self.capacity = capacity
    }

    /// The bytes written.
    package var bytes: UnsafeBufferPointer<UInt8> { UnsafeBufferPointer(start: base, count: count) }

    package mutating func append(_ byte: UInt8) {
        guard count < capacity else {
            overflowed = true
            return
        }
        base[count] = byte
        count += 1
    }

    package mutating func appendDigits(_ value: Int, width: Int) { Digits.write(value, width: width, to: &self) }

    package mutating func appendBytes(count: Int, _ write: (UnsafeMutablePointer<UInt8>) -> Void) {
        guard count >= 0, capacity - self.count >= count else {
            overflowed = true
            return
        }
        write(base + self.count)
        self.count += count
    }
}
