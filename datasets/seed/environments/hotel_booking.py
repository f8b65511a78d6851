"""A hotel group's reservation desk: guests, hotels, room types, reservations, payments and refunds."""

import datetime
from typing import TypedDict

RATE_PLANS = ("flexible", "non_refundable")
MAX_NIGHTS = 14
FREE_CANCELLATION_DAYS = 2
MAX_SPECIAL_REQUESTS = 3
ACTIVE_STATUSES = ("confirmed", "checked_in")


class GuestInfo(TypedDict):
    guest_id: str
    name: str
    email: str
    phone: str
    loyalty_tier: str  # "none" | "silver" | "gold"


class HotelInfo(TypedDict):
    hotel_id: str
    name: str
    city: str


class RoomTypeInfo(TypedDict):
    room_type_id: str
    hotel_id: str
    name: str
    max_occupancy: int
    total_rooms: int
    rates: dict[str, float]  # rate plan -> nightly price


class PaymentMethodInfo(TypedDict):
    payment_method_id: str
    guest_id: str
    label: str
    expires: str  # "YYYY-MM"


class ReservationInfo(TypedDict):
    reservation_id: str
    guest_id: str
    hotel_id: str
    room_type_id: str
    check_in: str
    check_out: str
    nights: int
    guests_count: int
    rate_plan: str
    nightly_rate: float
    total_price: float
    status: str  # "confirmed" | "cancelled" | "checked_in" | "checked_out"
    payment_method_id: str
    special_requests: list[str]


class RefundInfo(TypedDict):
    refund_id: str
    reservation_id: str
    payment_method_id: str
    amount: float
    reason: str


class HotelBooking:
    def __init__(self, init_config: dict):
        """Create the reservation records from the initial configuration."""
        self.current_date: str = init_config.get("current_date", "2026-05-04")
        self.guests: dict[str, GuestInfo] = init_config.get("guests", {})
        self.hotels: dict[str, HotelInfo] = init_config.get("hotels", {})
        self.room_types: dict[str, RoomTypeInfo] = init_config.get("room_types", {})
        self.payment_methods: dict[str, PaymentMethodInfo] = init_config.get("payment_methods", {})
        self.reservations: dict[str, ReservationInfo] = init_config.get("reservations", {})
        self.refunds: dict[str, RefundInfo] = init_config.get("refunds", {})
        self.next_reservation_number: int = init_config.get("next_reservation_number", 1)
        self.next_refund_number: int = init_config.get("next_refund_number", 1)

    # ------------------------------------------------------------------ helpers

    def _stay_error(self, check_in: str, check_out: str) -> str:
        try:
            start = datetime.date.fromisoformat(check_in)
            end = datetime.date.fromisoformat(check_out)
        except (TypeError, ValueError):
            return "Dates must be given as YYYY-MM-DD."
        if start < datetime.date.fromisoformat(self.current_date):
            return "The check-in date is in the past."
        if end <= start:
            return "The check-out date must be after the check-in date."
        if (end - start).days > MAX_NIGHTS:
            return f"A stay can last at most {MAX_NIGHTS} nights."
        return ""

    def _nights(self, check_in: str, check_out: str) -> int:
        return (datetime.date.fromisoformat(check_out) - datetime.date.fromisoformat(check_in)).days

    def _rooms_free(self, room_type_id: str, check_in: str, check_out: str, ignore_id: str) -> int:
        booked = sum(
            1
            for r in self.reservations.values()
            if r["room_type_id"] == room_type_id
            and r["status"] in ACTIVE_STATUSES
            and r["reservation_id"] != ignore_id
            and r["check_in"] < check_out
            and check_in < r["check_out"]
        )
        return self.room_types[room_type_id]["total_rooms"] - booked

    def _payment_error(self, guest_id: str, payment_method_id: str) -> str:
        method = self.payment_methods.get(payment_method_id)
        if method is None or method["guest_id"] != guest_id:
            return f"Payment method {payment_method_id} is not one of the guest's payment methods."
        if method["expires"] < self.current_date[:7]:
            return f"Payment method {payment_method_id} has expired."
        return ""

    def _modifiable(self, reservation_id: str) -> tuple[ReservationInfo | None, str]:
        reservation = self.reservations.get(reservation_id)
        if reservation is None:
            return None, f"No reservation with id {reservation_id}."
        if reservation["status"] != "confirmed":
            return None, f"Reservation {reservation_id} is {reservation['status']} and cannot be changed."
        if reservation["rate_plan"] == "non_refundable":
            return None, "Non-refundable reservations cannot be modified."
        return reservation, ""

    # ------------------------------------------------------------------ queries

    def find_guests(self, name: str = "", email: str = "") -> dict:
        """Search guest profiles by (part of) the name or by exact email address.

        Args:
            name: Part of the guest's name, case-insensitive.
            email: The guest's email address.
        """
        if not name and not email:
            return {"success": False, "error": "Give a name or an email to search for."}
        matches = [
            g
            for g in self.guests.values()
            if (not name or name.lower() in g["name"].lower()) and (not email or email.lower() == g["email"].lower())
        ]
        return {"success": True, "data": matches}

    def get_guest(self, guest_id: str) -> dict:
        """Get one guest profile.

        Args:
            guest_id: The guest's id, e.g. "G-201".
        """
        guest = self.guests.get(guest_id)
        if guest is None:
            return {"success": False, "error": f"No guest with id {guest_id}."}
        return {"success": True, "data": guest}

    def list_payment_methods(self, guest_id: str) -> dict:
        """List the payment methods stored for a guest.

        Args:
            guest_id: The guest's id.
        """
        if guest_id not in self.guests:
            return {"success": False, "error": f"No guest with id {guest_id}."}
        return {
            "success": True,
            "data": [p for p in self.payment_methods.values() if p["guest_id"] == guest_id],
        }

    def list_hotels(self, city: str = "") -> dict:
        """List the group's hotels, optionally in one city.

        Args:
            city: A city name (case-insensitive); empty for all hotels.
        """
        return {
            "success": True,
            "data": [h for h in self.hotels.values() if not city or h["city"].lower() == city.lower()],
        }

    def list_room_types(self, hotel_id: str) -> dict:
        """List a hotel's room types with their capacity and nightly rates per rate plan.

        Args:
            hotel_id: The hotel's id, e.g. "H-1".
        """
        if hotel_id not in self.hotels:
            return {"success": False, "error": f"No hotel with id {hotel_id}."}
        return {"success": True, "data": [r for r in self.room_types.values() if r["hotel_id"] == hotel_id]}

    def check_availability(self, hotel_id: str, check_in: str, check_out: str, guests_count: int = 1) -> dict:
        """List a hotel's room types that are free for the whole stay and fit the number of guests.

        Args:
            hotel_id: The hotel's id.
            check_in: Arrival date, YYYY-MM-DD.
            check_out: Departure date, YYYY-MM-DD.
            guests_count: Number of guests who will stay in the room.
        """
        if hotel_id not in self.hotels:
            return {"success": False, "error": f"No hotel with id {hotel_id}."}
        problem = self._stay_error(check_in, check_out)
        if problem:
            return {"success": False, "error": problem}
        nights = self._nights(check_in, check_out)
        options = []
        for room in self.room_types.values():
            if room["hotel_id"] != hotel_id or room["max_occupancy"] < guests_count:
                continue
            free = self._rooms_free(room["room_type_id"], check_in, check_out, "")
            if free > 0:
                totals = {plan: round(price * nights, 2) for plan, price in room["rates"].items()}
                options.append(
                    {
                        "room_type_id": room["room_type_id"],
                        "name": room["name"],
                        "rooms_free": free,
                        "nightly_rates": room["rates"],
                        "total_prices": totals,
                    }
                )
        return {"success": True, "data": {"nights": nights, "options": options}}

    def get_reservation(self, reservation_id: str) -> dict:
        """Get one reservation.

        Args:
            reservation_id: The reservation's id, e.g. "RES-3001".
        """
        reservation = self.reservations.get(reservation_id)
        if reservation is None:
            return {"success": False, "error": f"No reservation with id {reservation_id}."}
        return {"success": True, "data": reservation}

    def list_guest_reservations(self, guest_id: str) -> dict:
        """List all reservations held by a guest.

        Args:
            guest_id: The guest's id.
        """
        if guest_id not in self.guests:
            return {"success": False, "error": f"No guest with id {guest_id}."}
        found = [r for r in self.reservations.values() if r["guest_id"] == guest_id]
        found.sort(key=lambda r: r["check_in"])
        return {"success": True, "data": found}

    def list_refunds(self, reservation_id: str) -> dict:
        """List the refunds issued for a reservation.

        Args:
            reservation_id: The reservation's id.
        """
        if reservation_id not in self.reservations:
            return {"success": False, "error": f"No reservation with id {reservation_id}."}
        return {
            "success": True,
            "data": [r for r in self.refunds.values() if r["reservation_id"] == reservation_id],
        }

    # ------------------------------------------------------------------ changes

    def create_reservation(
        self,
        guest_id: str,
        room_type_id: str,
        check_in: str,
        check_out: str,
        guests_count: int,
        rate_plan: str,
        payment_method_id: str,
    ) -> dict:
        """Book a room for a guest and charge the stay to one of the guest's payment methods.

        Args:
            guest_id: The guest's id.
            room_type_id: The room type to book, e.g. "RT-11".
            check_in: Arrival date, YYYY-MM-DD.
            check_out: Departure date, YYYY-MM-DD.
            guests_count: Number of guests staying in the room.
            rate_plan: "flexible" or "non_refundable".
            payment_method_id: The guest's payment method to charge.
        """
        if guest_id not in self.guests:
            return {"success": False, "error": f"No guest with id {guest_id}."}
        room = self.room_types.get(room_type_id)
        if room is None:
            return {"success": False, "error": f"No room type with id {room_type_id}."}
        if rate_plan not in RATE_PLANS:
            return {"success": False, "error": "rate_plan must be 'flexible' or 'non_refundable'."}
        if guests_count < 1 or guests_count > room["max_occupancy"]:
            return {"success": False, "error": f"{room['name']} takes 1 to {room['max_occupancy']} guests."}
        problem = self._stay_error(check_in, check_out) or self._payment_error(guest_id, payment_method_id)
        if problem:
            return {"success": False, "error": problem}
        if self._rooms_free(room_type_id, check_in, check_out, "") <= 0:
            return {"success": False, "error": f"No {room['name']} is free for those dates."}
        nights = self._nights(check_in, check_out)
        reservation_id = f"RES-{self.next_reservation_number}"
        self.next_reservation_number += 1
        self.reservations[reservation_id] = {
            "reservation_id": reservation_id,
            "guest_id": guest_id,
            "hotel_id": room["hotel_id"],
            "room_type_id": room_type_id,
            "check_in": check_in,
            "check_out": check_out,
            "nights": nights,
            "guests_count": guests_count,
            "rate_plan": rate_plan,
            "nightly_rate": room["rates"][rate_plan],
            "total_price": round(room["rates"][rate_plan] * nights, 2),
            "status": "confirmed",
            "payment_method_id": payment_method_id,
            "special_requests": [],
        }
        return {"success": True, "data": self.reservations[reservation_id]}

    def change_reservation_dates(self, reservation_id: str, new_check_in: str, new_check_out: str) -> dict:
        """Move a flexible reservation to new dates in the same room type; the price is recalculated.

        Args:
            reservation_id: The reservation to change.
            new_check_in: New arrival date, YYYY-MM-DD.
            new_check_out: New departure date, YYYY-MM-DD.
        """
        reservation, problem = self._modifiable(reservation_id)
        if reservation is None:
            return {"success": False, "error": problem}
        problem = self._stay_error(new_check_in, new_check_out)
        if problem:
            return {"success": False, "error": problem}
        if self._rooms_free(reservation["room_type_id"], new_check_in, new_check_out, reservation_id) <= 0:
            return {"success": False, "error": "The room type is fully booked for the new dates."}
        nights = self._nights(new_check_in, new_check_out)
        reservation["check_in"] = new_check_in
        reservation["check_out"] = new_check_out
        reservation["nights"] = nights
        reservation["total_price"] = round(reservation["nightly_rate"] * nights, 2)
        return {"success": True, "data": reservation}

    def change_room_type(self, reservation_id: str, new_room_type_id: str) -> dict:
        """Move a flexible reservation to another room type of the same hotel; the price is recalculated.

        Args:
            reservation_id: The reservation to change.
            new_room_type_id: The room type to move to.
        """
        reservation, problem = self._modifiable(reservation_id)
        if reservation is None:
            return {"success": False, "error": problem}
        room = self.room_types.get(new_room_type_id)
        if room is None:
            return {"success": False, "error": f"No room type with id {new_room_type_id}."}
        if room["hotel_id"] != reservation["hotel_id"]:
            return {"success": False, "error": "The new room type must be in the same hotel."}
        if reservation["guests_count"] > room["max_occupancy"]:
            return {
                "success": False,
                "error": f"{room['name']} takes at most {room['max_occupancy']} guests.",
            }
        free = self._rooms_free(new_room_type_id, reservation["check_in"], reservation["check_out"], reservation_id)
        if free <= 0:
            return {"success": False, "error": f"No {room['name']} is free for those dates."}
        reservation["room_type_id"] = new_room_type_id
        reservation["nightly_rate"] = room["rates"][reservation["rate_plan"]]
        reservation["total_price"] = round(reservation["nightly_rate"] * reservation["nights"], 2)
        return {"success": True, "data": reservation}

    def update_guest_count(self, reservation_id: str, guests_count: int) -> dict:
        """Change the number of guests on a confirmed reservation (any rate plan).

        Args:
            reservation_id: The reservation to change.
            guests_count: The new number of guests.
        """
        reservation = self.reservations.get(reservation_id)
        if reservation is None:
            return {"success": False, "error": f"No reservation with id {reservation_id}."}
        if reservation["status"] != "confirmed":
            return {"success": False, "error": f"Reservation {reservation_id} is {reservation['status']}."}
        room = self.room_types[reservation["room_type_id"]]
        if guests_count < 1 or guests_count > room["max_occupancy"]:
            return {"success": False, "error": f"{room['name']} takes 1 to {room['max_occupancy']} guests."}
        reservation["guests_count"] = guests_count
        return {"success": True, "data": reservation}

    def change_payment_method(self, reservation_id: str, payment_method_id: str) -> dict:
        """Charge a confirmed reservation to another of the guest's payment methods.

        Args:
            reservation_id: The reservation to change.
            payment_method_id: The guest's payment method to use instead.
        """
        reservation = self.reservations.get(reservation_id)
        if reservation is None:
            return {"success": False, "error": f"No reservation with id {reservation_id}."}
        if reservation["status"] != "confirmed":
            return {"success": False, "error": f"Reservation {reservation_id} is {reservation['status']}."}
        problem = self._payment_error(reservation["guest_id"], payment_method_id)
        if problem:
            return {"success": False, "error": problem}
        reservation["payment_method_id"] = payment_method_id
        return {"success": True, "data": reservation}

    def cancel_reservation(self, reservation_id: str, reason: str = "") -> dict:
        """Cancel a confirmed reservation and refund what the rate plan allows to the original payment method.

        Flexible: full refund up to 2 days before check-in, otherwise the first night is kept.
        Non-refundable: no refund.

        Args:
            reservation_id: The reservation to cancel.
            reason: Why the guest cancels.
        """
        reservation = self.reservations.get(reservation_id)
        if reservation is None:
            return {"success": False, "error": f"No reservation with id {reservation_id}."}
        if reservation["status"] != "confirmed":
            return {"success": False, "error": f"Reservation {reservation_id} is {reservation['status']}."}
        amount = 0.0
        if reservation["rate_plan"] == "flexible":
            days_before = (
                datetime.date.fromisoformat(reservation["check_in"]) - datetime.date.fromisoformat(self.current_date)
            ).days
            amount = reservation["total_price"]
            if days_before < FREE_CANCELLATION_DAYS:
                amount = reservation["total_price"] - reservation["nightly_rate"]
        reservation["status"] = "cancelled"
        refund_id = ""
        if amount > 0:
            refund_id = f"RF-{self.next_refund_number}"
            self.next_refund_number += 1
            self.refunds[refund_id] = {
                "refund_id": refund_id,
                "reservation_id": reservation_id,
                "payment_method_id": reservation["payment_method_id"],
                "amount": round(amount, 2),
                "reason": reason,
            }
        return {
            "success": True,
            "data": {
                "reservation_id": reservation_id,
                "refund_id": refund_id,
                "refund_amount": round(amount, 2),
            },
        }

    def add_special_request(self, reservation_id: str, request: str) -> dict:
        """Add a special request (e.g. "late check-in", "extra pillows") to an upcoming or current stay.

        Args:
            reservation_id: The reservation.
            request: The request text.
        """
        reservation = self.reservations.get(reservation_id)
        if reservation is None:
            return {"success": False, "error": f"No reservation with id {reservation_id}."}
        if reservation["status"] not in ACTIVE_STATUSES:
            return {"success": False, "error": f"Reservation {reservation_id} is {reservation['status']}."}
        if not request.strip():
            return {"success": False, "error": "The request is empty."}
        if len(reservation["special_requests"]) >= MAX_SPECIAL_REQUESTS:
            return {
                "success": False,
                "error": f"At most {MAX_SPECIAL_REQUESTS} special requests per reservation.",
            }
        reservation["special_requests"].append(request.strip())
        return {"success": True, "data": reservation}

    def update_guest_contact(self, guest_id: str, email: str = "", phone: str = "") -> dict:
        """Change a guest's email address and/or phone number.

        Args:
            guest_id: The guest's id.
            email: The new email address (leave empty to keep).
            phone: The new phone number (leave empty to keep).
        """
        guest = self.guests.get(guest_id)
        if guest is None:
            return {"success": False, "error": f"No guest with id {guest_id}."}
        if not email and not phone:
            return {"success": False, "error": "Give a new email or phone number."}
        if email and ("@" not in email or "." not in email.split("@")[-1]):
            return {"success": False, "error": f"{email!r} is not a valid email address."}
        if email and any(g["email"].lower() == email.lower() for g in self.guests.values() if g is not guest):
            return {"success": False, "error": "That email belongs to another guest profile."}
        if email:
            guest["email"] = email
        if phone:
            guest["phone"] = phone
        return {"success": True, "data": guest}
