{ reports — a Pascal program that leaks, contends and frees twice at known
  lines, for run.sh, which checks what shoal's reports say of it.

    reports leaks        ReportMemoryLeaksOnShutdown := True, then leaks
                         objects, strings, a dynamic array and raw blocks
    reports leaks-quietly the same leaks without the switch: no report
    reports contention   threads free each other's blocks (SHOAL_CONTENTION=1)
    reports double-free  FreeMem twice on one block (SHOAL_CHECK=1) }
program reports;

{$mode objfpc}{$H+}

uses
  ShoalMM, cthreads, SysUtils, Classes;

type
  TFoo = class
    Value: Int64;
  end;

  TBar = class(TFoo)
    Name: string;
    Extra: array[0..5] of Int64;
  end;

  TIntegers = array of Integer;

  TConsumer = class(TThread)
  protected
    procedure Execute; override;
  end;

var
  Holders: array[0..15] of Pointer; { references no finalization releases }
  Handed: array[0..9999] of Pointer;
  HandedCount: LongInt = 0;

procedure LeakObjects;
begin
  TFoo.Create; { line: foo-1 }
  TFoo.Create; { line: foo-2 }
  TBar.Create; { line: bar }
end;

procedure LeakStrings;
var
  i: Integer;
  Wide: UnicodeString;
  Narrow: AnsiString;
begin
  for i := 1 to 5 do
  begin
    Wide := UnicodeString('leaked text ') + UnicodeString(IntToStr(i)); { line: wide }
    UnicodeString(Holders[i]) := Wide;
  end;
  for i := 6 to 8 do
  begin
    Narrow := 'leaked ansi ' + IntToStr(i * 1000); { line: narrow }
    AnsiString(Holders[i]) := Narrow;
  end;
end;

procedure LeakArray;
var
  Numbers: TIntegers;
begin
  SetLength(Numbers, 10); { line: array }
  Numbers[3] := 3;
  TIntegers(Holders[9]) := Numbers;
end;

procedure LeakRaw;
begin
  Holders[10] := GetMem(100); { line: raw }
end;

procedure TConsumer.Execute;
var
  i: Integer;
begin
  for i := 0 to High(Handed) do
    FreeMem(Handed[i]); { line: consumer-free }
end;

procedure Contend;
var
  i: Integer;
  Consumer: TConsumer;
begin
  for i := 0 to High(Handed) do
    Handed[i] := GetMem(48); { line: producer-get }
  Consumer := TConsumer.Create(False);
  Consumer.WaitFor;
  Consumer.Free;
end;

procedure FreeTwice;
var
  p: Pointer;
begin
  p := GetMem(40); { line: twice-get }
  FreeMem(p); { line: twice-first }
  FreeMem(p); { line: twice-second }
end;

begin
  if ParamStr(1) = 'leaks' then
  begin
    ReportMemoryLeaksOnShutdown := True;
    LeakObjects; { line: main-objects }
    LeakStrings; { line: main-strings }
    LeakArray; { line: main-array }
    LeakRaw; { line: main-raw }
  end
  else if ParamStr(1) = 'leaks-quietly' then
  begin
    LeakObjects;
    LeakRaw;
  end
  else if ParamStr(1) = 'contention' then
    Contend
  else if ParamStr(1) = 'double-free' then
    FreeTwice { line: main-twice }
  else
  begin
    Writeln(StdErr, 'usage: reports leaks|leaks-quietly|contention|double-free');
    Halt(2);
  end;
end.
