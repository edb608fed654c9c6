"""Exercise 04 answered with the same doubly linked list over slots as rust/src/lru.rs."""
NIL = -1


class LruList:
    def __init__(self, capacity):
        self.capacity = capacity
        self.newer = [NIL] * capacity
        self.older = [NIL] * capacity
        self.on = [False] * capacity
        self.head = self.tail = NIL
        self.size = 0

    def _unlink(self, slot):
        newer, older = self.newer[slot], self.older[slot]
        if newer == NIL:
            self.head = older
        else:
            self.older[newer] = older
        if older == NIL:
            self.tail = newer
        else:
            self.newer[older] = newer
        self.on[slot] = False
        self.size -= 1

    def touch(self, slot):
        if self.on[slot]:
            if self.head == slot:
                return
            self._unlink(slot)
        self.newer[slot], self.older[slot] = NIL, self.head
        if self.head != NIL:
            self.newer[self.head] = slot
        self.head = slot
        if self.tail == NIL:
            self.tail = slot
        self.on[slot] = True
        self.size += 1

    def remove(self, slot):
        if self.on[slot]:
            self._unlink(slot)

    def least_recent(self):
        return None if self.tail == NIL else self.tail

    def most_recent(self):
        return None if self.head == NIL else self.head

    def __contains__(self, slot):
        return self.on[slot]

    def __len__(self):
        return self.size

    def order(self):
        out, slot = [], self.head
        while slot != NIL:
            out.append(slot)
            slot = self.older[slot]
        return out
